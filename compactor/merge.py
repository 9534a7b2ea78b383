"""Run one compaction job's data path: read inputs with two streams each, write outputs.

For every input file we open exactly two forward-only streams (two GET requests), however
many partitions it holds: stream A over the META section (index entries + key hashes,
pass 1) and stream B over the DATA section (record batches, pass 2). All inputs are walked
partition by partition in the common (topic, partition) order; no stream seeks back or is
reopened. Per compacted partition, pass 1 streams the key hashes alone into the offset map
(`dedupe.pass1`: memory bounded by the map, not by the records), then pass 2 copies
surviving batches byte for byte and rewrites partially surviving ones from their
survivors' record bytes (`filter_batch`: new header, same base offset, so every offset is
unchanged; the record walk and copy run in C), compressed with the topic's rewrite codec
(Kafka's topic `compression.type`; `producer`: the input batch's own codec). Output batches
go to the output chunk in runs (`RUN_BYTES`), checked and written once per run.
Compacted-topic data and delete-policy data go to two different output objects, each
streamed to the store (multipart when large).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fileformat import (
    KEY_HASH_SIZE,
    ChunkBuilder,
    ChunkIndex,
    Compression,
    EntryHashes,
    FileWriter,
    Readable,
    Sections,
    iter_meta_streamed,
)
from fileformat.batch import BatchHeader
from fileformat.datareader import DataReader, iter_headers
from fileformat.errors import CorruptDataError, naming
from fileformat.filter import filter_batch
from fileformat.stream import ReadAhead
from metadata.txnlog import AbortedIndex
from objectstore import ObjectStore
from planner import PartitionPlan

from .dedupe import HashSource, Mask, Pass1, map_capacity, pass1
from .offsetmap import HashSpool

log = logging.getLogger(__name__)

RUN_BYTES = 8 << 20
"""Bytes held by output batches waiting to be appended to the output chunk in one call
(filtered copies, and the whole input chunk a copied batch is a view of): bounds pass 2's
memory, amortises its checks."""

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class InputFile:
    """An input object and where its sections are (from the metadata store: no extra GET)."""

    file_id: int
    object_key: str
    sections: Sections
    # Live segments of this file: (topic, partition) -> (base_offset, last_offset, cleaned_at).
    segments: Mapping[TopicPartition, tuple[int, int, int | None]]


# Opens one input file's META and DATA sections for forward reading: (meta, data), each
# positioned at its section's start; whatever it opens it registers on the ExitStack.
InputOpener = Callable[[ObjectStore, InputFile, ExitStack], tuple[Readable, Readable]]


def open_streams(store: ObjectStore, f: InputFile, stack: ExitStack) -> tuple[Readable, Readable]:
    """Two forward-only streams, one GET each, however many partitions the file holds."""
    s = f.sections
    meta = stack.enter_context(
        store.open_stream(f.object_key, s.meta_offset, s.meta_offset + s.meta_length))
    data = stack.enter_context(
        store.open_stream(f.object_key, s.data_offset, s.data_offset + s.data_length))
    return meta, data


@dataclass(slots=True)
class OutputChunkInfo:
    """What the metadata commit needs about one output chunk beyond its ChunkIndex."""

    partition: TopicPartition  # matches the writer's layout chunks, in the same order
    base_offset: int
    last_offset: int
    cleaned_at_ms: int | None


@dataclass(slots=True)
class MergeStats:
    """What one job read and wrote."""

    input_files: int = 0
    input_bytes: int = 0
    records_in: int = 0
    records_out: int = 0
    tombstones_dropped: int = 0
    duplicates_dropped: int = 0
    batches_copied: int = 0
    batches_reencoded: int = 0
    partitions: int = 0
    partial_cleans: int = 0  # partitions whose offset map filled up
    null_keys_kept: int = 0  # null keys and transaction markers kept by the map
    aborted_dropped: int = 0  # records of aborted transactions dropped
    markers_removed: int = 0  # COMMIT/ABORT markers past their delete horizon
    # New cleaner checkpoints (first offset not deduplicated) per partition.
    checkpoints: dict[TopicPartition, int] = field(default_factory=dict)
    # Offsets of the transaction markers removed, per partition (their aborted-transaction
    # index rows go in the job's commit).
    markers_dropped: dict[TopicPartition, list[int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in ("checkpoints", "markers_dropped")}


@dataclass(slots=True)
class OutputTarget:
    """One output object being written: its FileWriter and what went into it."""

    writer: FileWriter
    chunks: list[OutputChunkInfo] = field(default_factory=list)


class _Input:
    """The two streams of one input file and the next META entry of stream A."""

    def __init__(self, f: InputFile, meta: Readable, data: Readable) -> None:
        self.file = f
        self._meta: Iterator[tuple[ChunkIndex, EntryHashes]] = iter_meta_streamed(
            ReadAhead(meta), f.sections.meta_offset, f.sections.meta_length
        )
        self._data = DataReader(data, f.sections.data_offset)
        self.head: tuple[ChunkIndex, EntryHashes] | None = None
        self.advance()

    # Every read of the input names its object in a FormatError (a corrupt input fails
    # the job with the key in its error, and nothing built from it is committed).

    def advance(self) -> None:
        with naming(self.file.object_key):
            self.head = next(self._meta, None)

    def read_batches(self, index: ChunkIndex) -> list[tuple[BatchHeader, memoryview]]:
        with naming(self.file.object_key):
            return self._data.read_batches(index)

    def skip_chunk(self, index: ChunkIndex) -> None:
        with naming(self.file.object_key):
            self._data.skip_chunk(index)

    @property
    def key(self) -> TopicPartition | None:
        return None if self.head is None else (self.head[0].topic, self.head[0].partition)

    def finish(self) -> None:
        """Drain both streams to their ends so every CRC (incl. META trailer) is checked."""
        while self.head is not None:
            self.skip_chunk(self.head[0])
            self.advance()


class _NamedHashes:
    """An input's key hashes for pass 1 (a `HashSource`); a FormatError (the entry's CRC
    is checked as its last hash is read) names the input's object."""

    __slots__ = ("_hashes", "_key")

    def __init__(self, key: str, hashes: HashSource) -> None:
        self._key = key
        self._hashes = hashes

    def read(self, max_hashes: int, /) -> bytes:
        with naming(self._key):
            return self._hashes.read(max_hashes)


def _offsets_of(ci: ChunkIndex, base: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    rel = np.frombuffer(ci.offsets.to_array(), dtype=np.uint32)
    return rel.astype(np.int64) + base


def merge(
    store: ObjectStore,
    inputs: Sequence[InputFile],
    plans: Iterable[PartitionPlan],
    *,
    compacted_out: Callable[[], OutputTarget],
    delete_out: Callable[[], OutputTarget],
    now_ms: int,
    memory_budget: int,
    heartbeat: Callable[[], None] = lambda: None,
    open_input: InputOpener = open_streams,
    after_pass1: Callable[[TopicPartition], None] = lambda tp: None,
    aborted: Mapping[TopicPartition, AbortedIndex] | None = None,
) -> MergeStats:
    """Merge `inputs` into the outputs created on demand by `compacted_out`/`delete_out`.

    `plans` (the job's `JobSpec.partitions`) are what the planner decided: a partition with
    a plan is compacted (deduplicated as the plan says, partially surviving batches
    rewritten in its `codec`, None: each keeps its input codec) and goes to the compacted
    output; every other partition is copied as it is to the delete-policy output.
    `open_input` opens each input's two sections (default: two streams, two GETs per file).
    `after_pass1` is called after each partition's pass 1, before its pass 2 (the memory
    benchmark reads the peak there). `aborted`: per compacted partition, its aborted
    transactions (the metadata's index): their records never enter pass 1's map and are
    dropped in pass 2 whatever their keys, within the range the clean covers (Kafka's
    CleanedTransactionMetadata). Which records those are is read from the batch headers of
    the input chunks an aborted transaction overlaps: one more ranged GET per such chunk
    (headers only are kept), none for a partition without aborted transactions.
    """
    by_tp = {(p.topic, p.partition): p for p in plans}
    stats = MergeStats(input_files=len(inputs))
    capacity = map_capacity(memory_budget)
    targets: dict[bool, OutputTarget] = {}

    def target(compacted: bool) -> OutputTarget:
        if compacted not in targets:
            targets[compacted] = compacted_out() if compacted else delete_out()
        return targets[compacted]

    with ExitStack() as stack:
        opened = [_Input(f, *open_input(store, f, stack)) for f in inputs]
        stats.input_bytes = sum(f.sections.data_length + f.sections.meta_length for f in inputs)
        while (step := _next_partition(opened)) is not None:
            tp, live = step
            if live:
                plan = by_tp.get(tp)
                txns = (aborted or {}).get(tp) if plan is not None else None
                with HashSpool() as spool:
                    _merge_partition(tp, live, target(plan is not None), plan, stats, spool,
                                     capacity=capacity, now_ms=now_ms, after_pass1=after_pass1,
                                     aborted=_aborted_masks(store, live, tp, txns)
                                     if txns else None)
                stats.partitions += 1
            heartbeat()
        for i in opened:
            i.finish()
    return stats


def _aborted_masks(store: ObjectStore, inputs: Sequence[_Input], tp: TopicPartition,
                   txns: AbortedIndex) -> list[Mask | None]:
    """Per input chunk of the partition (in `inputs` order): which of its records belong to
    an aborted transaction (None: none can, no aborted range overlaps the chunk). The
    chunk's batch headers are read from one ranged stream of its bytes, record bytes
    skipped, so memory stays one header."""
    masks: list[Mask | None] = []
    for i in inputs:
        assert i.head is not None
        ci, base = i.head[0], i.file.segments[tp][0]
        if not txns.overlaps(base, base + ci.offset_span - 1):
            masks.append(None)
            continue
        mask = np.zeros(ci.record_count, dtype=np.bool_)
        pos = 0
        with naming(i.file.object_key), store.open_stream(
                i.file.object_key, ci.data_pos, ci.data_pos + ci.data_len) as stream:
            for header in iter_headers(stream, ci.data_len):
                n = header.record_count
                if header.is_transactional and not header.is_control and txns.aborted(
                        header.producer_id, base + header.base_offset):
                    mask[pos:pos + n] = True
                pos += n
        if pos != ci.record_count:
            raise CorruptDataError(f"{tp[0]}/{tp[1]}: batches hold {pos} records, index says"
                                   f" {ci.record_count}")
        masks.append(mask if mask.any() else None)
    return masks


class _Unkeyed:
    """A HashSource whose records at the masked positions read as null keys (the null
    hash): aborted records, kept out of pass 1's offset map."""

    __slots__ = ("_mask", "_pos", "_source")

    def __init__(self, source: HashSource, mask: Mask) -> None:
        self._source = source
        self._mask = mask
        self._pos = 0

    def read(self, max_hashes: int, /) -> bytes:
        data = self._source.read(max_hashes)
        n = len(data) // KEY_HASH_SIZE
        part = self._mask[self._pos:self._pos + n]
        self._pos += n
        if not part.any():
            return data
        out = np.frombuffer(data, dtype=np.uint8).reshape(n, KEY_HASH_SIZE).copy()
        out[part] = 0
        return out.tobytes()


def _next_partition(opened: Sequence[_Input]) -> tuple[TopicPartition, list[_Input]] | None:
    """The next partition in (topic, partition) order and the inputs holding a live segment
    of it, in offset order (None: every input is read to its end). Dead chunks of it (no
    live segment: replaced or past retention) are read past in both streams."""
    keys = [i.key for i in opened if i.key is not None]
    if not keys:
        return None
    tp = min(keys)
    live = []
    for i in opened:
        if i.key != tp:
            continue
        if tp in i.file.segments:
            live.append(i)
        else:
            assert i.head is not None
            i.skip_chunk(i.head[0])
            i.advance()
    live.sort(key=lambda i: i.file.segments[tp][0])
    return tp, live


class _OutputRun:
    """Output batches of one partition waiting to be appended in one call, with their
    records' index data gathered per input chunk: chunk-relative offsets and, for keyed
    chunks, key hashes, tombstone flags and first-cleaned times."""

    def __init__(self) -> None:
        self.raws: list[Any] = []
        self.bases: list[int] = []
        self.size = 0  # bytes it holds (see RUN_BYTES)
        self._parts: list[tuple[Any, Any, Any, Any]] = []

    def add_index(self, rel: Any, hashes: Any, tombs: Any, times: Any, lo: int,
                  hi: int) -> None:
        """Survivors [lo, hi) of a chunk's survivors' arrays: offsets, hashes (None: an
        unkeyed chunk), tombstone flags and first-cleaned times (None: no tombstones)."""
        self._parts.append((rel[lo:hi], None if hashes is None else hashes[lo:hi],
                            None if tombs is None else tombs[lo:hi],
                            None if times is None else times[lo:hi]))

    def flush(self, builder: ChunkBuilder) -> int:
        """Append the run's batches to `builder`, then empty it; returns their records."""
        parts, self._parts = self._parts, []
        rel = np.concatenate([p[0] for p in parts])
        if parts[0][1] is None:
            builder.append_compacted_run(self.raws, bases=self.bases, offsets=rel)
        else:
            hashes = b"".join(p[1].tobytes() for p in parts)
            if all(p[2] is None for p in parts):
                builder.append_compacted_run(self.raws, bases=self.bases, offsets=rel,
                                             key_hashes=hashes)
            else:
                tombs = np.concatenate([np.zeros(len(p[0]), np.bool_) if p[2] is None
                                        else p[2] for p in parts])
                times = np.concatenate([np.zeros(len(p[0]), np.int64) if p[3] is None
                                        else p[3] for p in parts])
                builder.append_compacted_run(
                    self.raws, bases=self.bases, offsets=rel, tombstones=rel[tombs],
                    key_hashes=hashes, tombstone_cleaned_at=times[tombs])
        self.raws, self.bases, self.size = [], [], 0
        return len(rel)


def _records_below(heads: Sequence[tuple[ChunkIndex, Any, int]], offset: int) -> int:
    """How many of the heads' records lie below `offset` (the heads in offset order)."""
    below = 0
    for ci, _, base in heads:
        c = offset - base
        if c > 0:
            below += ci.record_count if c > ci.offset_span else ci.offsets.rank(c - 1)
    return below


def _offset_at(heads: Sequence[tuple[ChunkIndex, Any, int]], position: int) -> int:
    """The absolute offset of the heads' record at `position` (< their record count)."""
    for ci, _, base in heads:
        if position < ci.record_count:
            return base + int(ci.offsets[position])
        position -= ci.record_count
    raise IndexError("position beyond the heads' records")


# An input chunk of the partition: its index, its key hashes (stream A) and its base offset.
_Head = tuple[ChunkIndex, EntryHashes, int]


def _merge_partition(
    tp: TopicPartition,
    inputs: list[_Input],
    out: OutputTarget,
    plan: PartitionPlan | None,
    stats: MergeStats,
    spool: HashSpool,
    *,
    capacity: int,
    now_ms: int,
    after_pass1: Callable[[TopicPartition], None],
    aborted: Sequence[Mask | None] | None = None,
) -> None:
    """Pass 1 over the META heads of `inputs` (key hashes into the map and `spool`), then
    pass 2 over their DATA streams; the output chunk goes to `out`. `plan` None: not a
    compacted partition (copied as it is). `aborted`: per input chunk, its records of
    aborted transactions (`_aborted_masks`)."""
    segs = [i.file.segments[tp] for i in inputs]
    heads: list[_Head] = []
    for i, seg in zip(inputs, segs, strict=True):
        assert i.head is not None
        heads.append((i.head[0], i.head[1], seg[0]))
    out_base, out_last = segs[0][0], max(s[1] for s in segs)
    n = sum(ci.record_count for ci, _, _ in heads)
    stats.records_in += n
    keyed = plan is not None and all(ci.keyed for ci, _, _ in heads)
    p1 = None
    if plan is not None and keyed and n:
        p1 = _pass1(tp, inputs, heads, plan, stats, spool, capacity=capacity,
                    out_last=out_last, aborted=aborted)
    for i in inputs:
        i.advance()  # every entry's hashes were read (or are skipped): its CRC is checked
    after_pass1(tp)
    written = _PartitionOutput(tp, out, out_base, keyed, None if plan is None else plan.codec,
                               stats)
    _pass2(inputs, heads, written, p1, plan, stats, now_ms=now_ms,
           aborted=aborted if p1 is not None else None)
    if written.finish():
        out.chunks.append(OutputChunkInfo(tp, out_base, out_last,
                                          _cleaned_at(segs, plan, now_ms)))


def _pass1(tp: TopicPartition, inputs: Sequence[_Input], heads: Sequence[_Head],
           plan: PartitionPlan, stats: MergeStats, spool: HashSpool, *, capacity: int,
           out_last: int, aborted: Sequence[Mask | None] | None = None) -> Pass1:
    """Pass 1: every record's key hash, from stream A only, into the map (the dirty
    cleanable records: from the cleaner checkpoint to the first uncleanable offset) and
    the spool. Records a whole-log clean's new checkpoint, a partial clean (the map
    filled up) and null keys kept."""
    n = sum(ci.record_count for ci, _, _ in heads)
    cleanable = _records_below(heads, plan.clean_upto_offset)
    dirty = min(_records_below(heads, plan.dirty_start_offset), n)
    sources: list[HashSource] = [_NamedHashes(i.file.object_key, h) for (_, h, _), i
                                 in zip(heads, inputs, strict=True)]
    if aborted is not None:
        sources = [s if m is None else _Unkeyed(s, m)
                   for s, m in zip(sources, aborted, strict=True)]
    p1 = pass1(sources, (dirty, max(cleanable, dirty)), capacity, spool)
    topic, partition = tp
    if plan.whole_log:
        # The whole log was rewritten against the map: the dirty records up to the
        # map's end are now clean (Kafka's cleaner checkpoint advances the same way).
        stats.checkpoints[tp] = (_offset_at(heads, p1.map_end)
                                 if p1.map_end < n else out_last + 1)
    if p1.map_end < cleanable:
        stats.partial_cleans += 1
        log.info("%s/%d: offset map full after %d keys; partial clean up to offset %d",
                 topic, partition, p1.distinct_keys, _offset_at(heads, p1.map_end))
    if p1.null_keys:
        stats.null_keys_kept += p1.null_keys
        log.info("%s/%d: %d records without a key (null keys, transaction markers, aborted"
                 " records) were kept out of the offset map", topic, partition, p1.null_keys)
    return p1


def _pass2(inputs: Sequence[_Input], heads: Sequence[_Head], written: _PartitionOutput,
           p1: Pass1 | None, plan: PartitionPlan | None, stats: MergeStats, *,
           now_ms: int, aborted: Sequence[Mask | None] | None = None) -> None:
    """Pass 2: survivors from stream B, in the same order, one chunk's records at a time;
    records of aborted transactions go wherever the map's range covers them."""
    start = 0  # position of the chunk's first record among the partition's
    # Producers whose current transaction still has a record kept (in offset order).
    live_txns: set[int] = set()
    for k, ((ci, _, base), i) in enumerate(zip(heads, inputs, strict=True)):
        cnt = ci.record_count
        batches = i.read_batches(ci)
        offsets = _offsets_of(ci, base)
        all_hashes, keep = p1.take(cnt) if p1 is not None else (b"", np.ones(cnt, np.bool_))
        stats.duplicates_dropped += int(cnt - np.count_nonzero(keep))
        mask = None if aborted is None else aborted[k]
        if mask is not None and p1 is not None:
            drop = keep & mask
            drop[max(0, p1.map_end - start):] = False  # past the clean: left as they are
            keep &= ~drop
            stats.aborted_dropped += int(np.count_nonzero(drop))

        tombs = _tombstones(ci, base, offsets) if written.keyed else None
        if written.keyed and p1 is not None and plan is not None and plan.whole_log:
            free = _free_markers(batches, keep, live_txns)
            if free is not None:  # held to the delete horizon like tombstones
                tombs = _hold_markers(tombs, free)
                held = keep & free
            if tombs is not None:
                stats.tombstones_dropped += _delete_horizon(
                    keep, *tombs, cleaned=p1.map_end - start,
                    retention_ms=plan.delete_retention_ms, now_ms=now_ms)
            if free is not None:
                gone = held & ~keep
                if gone.any():
                    n_gone = int(np.count_nonzero(gone))
                    stats.tombstones_dropped -= n_gone
                    stats.markers_removed += n_gone
                    stats.markers_dropped.setdefault(written.tp, []).extend(
                        int(o) for o in offsets[gone])
        start += cnt
        sel = np.flatnonzero(keep)
        if len(sel):
            # The chunk's survivors' index data, sliced into the runs its batches go to.
            columns = (offsets[sel] - written.base_offset,
                       np.frombuffer(all_hashes, dtype="V16")[sel] if written.keyed else None,
                       None if tombs is None else tombs[0][sel],
                       None if tombs is None else tombs[1][sel])
            written.add_chunk(ci, base, batches, keep, columns)


def _tombstones(ci: ChunkIndex, base: int, offsets: np.ndarray[Any, np.dtype[np.int64]],
                ) -> tuple[np.ndarray[Any, np.dtype[np.bool_]],
                           np.ndarray[Any, np.dtype[np.int64]]] | None:
    """A keyed chunk's tombstones: a mask over its records and their first-cleaned times
    (0: never retained by a whole-log clean yet); None: it has none."""
    if not len(ci.tombstones):
        return None
    cnt = ci.record_count
    mask = np.zeros(cnt, dtype=np.bool_)
    cleaned = np.zeros(cnt, dtype=np.int64)
    rel = np.frombuffer(ci.tombstones.to_array(), dtype=np.uint32).astype(np.int64)
    where = np.searchsorted(offsets, rel + base)
    mask[where] = True
    cleaned[where] = ci.tombstone_cleaned_at
    return mask, cleaned


def _free_markers(batches: Sequence[tuple[BatchHeader, memoryview]],
                  keep: np.ndarray[Any, np.dtype[np.bool_]],
                  live_txns: set[int]) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
    """The chunk's transaction markers none of whose transaction's records is kept (a mask
    over its records; None: none), in a whole-log clean walked in offset order. A producer
    has one transaction open at a time, so its transactional batches since its last marker
    are the next marker's transaction; `live_txns` carries the producers whose current
    transaction still has a kept record from chunk to chunk (Kafka's
    CleanedTransactionMetadata: a marker may go only when the clean traversed no batch of
    its transaction). Per batch, from the headers pass 2 already holds."""
    free: np.ndarray[Any, np.dtype[np.bool_]] | None = None
    pos = 0
    for header, _ in batches:
        bn = header.record_count
        if header.is_control:
            if header.producer_id not in live_txns:
                if free is None:
                    free = np.zeros(len(keep), dtype=np.bool_)
                free[pos:pos + bn] = True
            live_txns.discard(header.producer_id)
        elif header.is_transactional and keep[pos:pos + bn].any():
            live_txns.add(header.producer_id)
        pos += bn
    return free


def _hold_markers(tombs: tuple[np.ndarray[Any, np.dtype[np.bool_]],
                               np.ndarray[Any, np.dtype[np.int64]]] | None,
                  free: np.ndarray[Any, np.dtype[np.bool_]],
                  ) -> tuple[np.ndarray[Any, np.dtype[np.bool_]],
                             np.ndarray[Any, np.dtype[np.int64]]]:
    """The chunk's tombstones with its free markers added: from now on the index holds them
    among the records with a delete horizon (their first-cleaned time, the planner's
    re-clean when it passes), as Kafka's deleteHorizonMs on a control batch (KIP-534)."""
    if tombs is None:
        return free.copy(), np.zeros(len(free), dtype=np.int64)
    return tombs[0] | free, tombs[1]


def _delete_horizon(keep: np.ndarray[Any, np.dtype[np.bool_]],
                    mask: np.ndarray[Any, np.dtype[np.bool_]],
                    cleaned_at: np.ndarray[Any, np.dtype[np.int64]], *, cleaned: int,
                    retention_ms: int, now_ms: int) -> int:
    """Kafka's delete horizon, in a whole-log clean: a tombstone goes once
    delete.retention.ms passed since a whole-log clean first retained it, only among the
    chunk's first `cleaned` records (the range the map covered). Clears dropped ones in
    `keep`, gives the tombstones retained now their first-cleaned time (in `cleaned_at`);
    returns how many were dropped."""
    in_range = np.zeros(len(keep), dtype=np.bool_)
    in_range[: max(0, cleaned)] = True
    drop = keep & mask & in_range & (cleaned_at > 0) & (cleaned_at + retention_ms <= now_ms)
    keep &= ~drop
    fresh = keep & mask & (cleaned_at == 0) & in_range
    cleaned_at[fresh] = now_ms
    return int(np.count_nonzero(drop))


def _cleaned_at(segs: Sequence[tuple[int, int, int | None]], plan: PartitionPlan | None,
                now_ms: int) -> int | None:
    """The output segment's cleaned time: now after a whole-log clean, else the latest of
    its inputs' if they were all cleaned (None: some input was dirty)."""
    if plan is not None and plan.whole_log:
        return now_ms
    cleaned_ats = [s[2] for s in segs]
    if all(c is not None for c in cleaned_ats):
        return max(c for c in cleaned_ats if c is not None)
    return None


class _PartitionOutput:
    """One partition's output chunk: surviving batches gathered in a run (`_OutputRun`),
    appended to the chunk (opened on the first append) whenever the run holds RUN_BYTES,
    and at the end."""

    def __init__(self, tp: TopicPartition, out: OutputTarget, base_offset: int, keyed: bool,
                 codec: Compression | None, stats: MergeStats) -> None:
        self.tp = tp
        self.out = out
        self.base_offset = base_offset
        self.keyed = keyed
        self.codec = codec  # None: a rewritten batch keeps its input codec
        self.stats = stats
        self.run = _OutputRun()
        self.builder: ChunkBuilder | None = None

    def add_chunk(self, ci: ChunkIndex, base: int, batches: list[tuple[BatchHeader, memoryview]],
                  keep: np.ndarray[Any, np.dtype[np.bool_]],
                  columns: tuple[Any, Any, Any, Any]) -> None:
        """The survivors (`keep`) of one input chunk's `batches` (the chunk at offset
        `base`): whole batches copied byte for byte, partly surviving ones rewritten from
        their survivors' record bytes; `columns`: the survivors' index data for
        `_OutputRun.add_index`."""
        run, stats, codec, out_base = self.run, self.stats, self.codec, self.base_offset
        pos = taken = seen = 0  # records walked; survivors handed to the run; walked
        holding = False  # a pending copied batch is a view of this chunk's bytes
        for header, view in batches:
            bn = header.record_count
            mask = keep[pos : pos + bn]
            pos += bn
            kept = int(np.count_nonzero(mask))
            if not kept:
                continue
            new_base = header.base_offset + base - out_base
            if kept == bn:
                run.raws.append(view)
                if not holding:  # the run holds the whole chunk's bytes
                    run.size += ci.data_len
                    holding = True
                stats.batches_copied += 1
            else:
                # Survivors' record bytes are copied as they are; the batch keeps its
                # base offset (placed in the output chunk) and timestamp, so their
                # deltas (offsets) stay valid.
                run.raws.append(filter_batch(
                    view, header, mask, base_offset=new_base,
                    compression=header.compression if codec is None else codec))
                run.size += len(run.raws[-1])
                stats.batches_reencoded += 1
            run.bases.append(new_base)
            seen += kept
            if run.size >= RUN_BYTES:
                run.add_index(*columns, taken, seen)
                taken = seen
                self.flush()
                holding = False
        if pos != ci.record_count:
            raise RuntimeError(f"{self.tp[0]}/{self.tp[1]}: batches hold {pos} records,"
                               f" index says {ci.record_count}")
        if seen > taken:
            run.add_index(*columns, taken, seen)

    def flush(self) -> None:
        """Append the run to the chunk, opening it first if need be."""
        if self.builder is None:
            self.builder = self.out.writer.open_chunk(*self.tp, base_offset=self.base_offset,
                                                      keyed=self.keyed)
        self.stats.records_out += self.run.flush(self.builder)

    def finish(self) -> bool:
        """Append what the run still holds and add the chunk to the output; False: no
        record survived (no chunk)."""
        if self.run.raws:
            self.flush()
        if self.builder is None:
            return False
        self.out.writer.add(self.builder.finish())
        return True
