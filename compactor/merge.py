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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fileformat import (
    ChunkBuilder,
    ChunkIndex,
    Compression,
    EntryHashes,
    FileWriter,
    Readable,
    iter_meta_streamed,
)
from fileformat.batch import BatchHeader
from fileformat.datareader import DataReader
from fileformat.errors import naming
from fileformat.filter import filter_batch
from fileformat.stream import ReadAhead
from objectstore import ObjectStore

from .dedupe import HashSource, Pass1, map_capacity, pass1
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
    data_offset: int
    data_length: int
    meta_offset: int
    meta_length: int
    # Live segments of this file: (topic, partition) -> (base_offset, last_offset, cleaned_at).
    segments: Mapping[TopicPartition, tuple[int, int, int | None]]


# Opens one input file's META and DATA sections for forward reading: (meta, data), each
# positioned at its section's start; whatever it opens it registers on the ExitStack.
InputOpener = Callable[[ObjectStore, InputFile, ExitStack], tuple[Readable, Readable]]


def open_streams(store: ObjectStore, f: InputFile, stack: ExitStack) -> tuple[Readable, Readable]:
    """Two forward-only streams, one GET each, however many partitions the file holds."""
    meta = stack.enter_context(
        store.open_stream(f.object_key, f.meta_offset, f.meta_offset + f.meta_length))
    data = stack.enter_context(
        store.open_stream(f.object_key, f.data_offset, f.data_offset + f.data_length))
    return meta, data


@dataclass(frozen=True, slots=True)
class PartitionRule:
    """How to treat one compacted partition in this job (from the planner)."""

    whole_log: bool  # inputs hold every live segment from the log start: tombstones may go
    clean_upto_offset: int  # records at or above are younger than min.compaction.lag.ms
    delete_retention_ms: int
    dirty_start_offset: int = 0  # the cleaner checkpoint: the offset map starts here


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
    null_keys_kept: int = 0
    # New cleaner checkpoints (first offset not deduplicated) per partition.
    checkpoints: dict[TopicPartition, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "checkpoints"}


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
            ReadAhead(meta), f.meta_offset, f.meta_length
        )
        self._data = DataReader(data, f.data_offset)
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
    *,
    compacted_topics: frozenset[str],
    rules: Mapping[TopicPartition, PartitionRule],
    compacted_out: Callable[[], OutputTarget],
    delete_out: Callable[[], OutputTarget],
    now_ms: int,
    memory_budget: int,
    codecs: Mapping[str, Compression | None] | None = None,
    heartbeat: Callable[[], None] = lambda: None,
    open_input: InputOpener = open_streams,
    after_pass1: Callable[[TopicPartition], None] = lambda tp: None,
) -> MergeStats:
    """Merge `inputs` into the outputs created on demand by `compacted_out`/`delete_out`.

    `codecs` gives, per topic, the codec partially surviving batches are rewritten in;
    None or a missing topic: each keeps its input codec (Kafka's `producer`). `open_input`
    opens each input's two sections (default: two streams, two GETs per file).
    `after_pass1` is called after each partition's pass 1, before its pass 2 (the memory
    benchmark reads the peak there).
    """
    stats = MergeStats(input_files=len(inputs))
    capacity = map_capacity(memory_budget)
    targets: dict[bool, OutputTarget] = {}

    def target(compacted: bool) -> OutputTarget:
        if compacted not in targets:
            targets[compacted] = compacted_out() if compacted else delete_out()
        return targets[compacted]

    with ExitStack() as stack:
        opened = [_Input(f, *open_input(store, f, stack)) for f in inputs]
        stats.input_bytes = sum(f.data_length + f.meta_length for f in inputs)
        while True:
            keys = [i.key for i in opened if i.key is not None]
            if not keys:
                break
            tp = min(keys)
            holders = [i for i in opened if i.key == tp]
            live = [i for i in holders if tp in i.file.segments]
            for i in holders:
                if i not in live:  # a dead chunk: read past it in both streams
                    assert i.head is not None
                    i.skip_chunk(i.head[0])
                    i.advance()
            if live:
                # Inputs in offset order of this partition's segments.
                live.sort(key=lambda i: i.file.segments[tp][0])
                compacted = tp[0] in compacted_topics
                with HashSpool() as spool:
                    _merge_partition(
                        tp, live, target(compacted), compacted, rules.get(tp), stats, spool,
                        capacity=capacity, now_ms=now_ms, codec=(codecs or {}).get(tp[0]),
                        after_pass1=after_pass1,
                    )
                stats.partitions += 1
            heartbeat()
        for i in opened:
            i.finish()
    return stats


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


def _merge_partition(
    tp: TopicPartition,
    inputs: list[_Input],
    out: OutputTarget,
    compacted: bool,
    rule: PartitionRule | None,
    stats: MergeStats,
    spool: HashSpool,
    *,
    capacity: int,
    now_ms: int,
    codec: Compression | None,
    after_pass1: Callable[[TopicPartition], None],
) -> None:
    """Pass 1 over the META heads of `inputs` (key hashes into the map and `spool`), then
    pass 2 over their DATA streams."""
    topic, partition = tp
    segs = [i.file.segments[tp] for i in inputs]
    out_base = segs[0][0]
    out_last = max(s[1] for s in segs)
    # ---- pass 1: every record's key hash, from stream A only, into the map and the spool.
    heads: list[tuple[ChunkIndex, EntryHashes, int]] = []
    for i, seg in zip(inputs, segs, strict=True):
        assert i.head is not None
        heads.append((i.head[0], i.head[1], seg[0]))
    keyed = compacted and all(ci.keyed for ci, _, _ in heads)
    counts = [ci.record_count for ci, _, _ in heads]
    n = sum(counts)
    stats.records_in += n
    p1: Pass1 | None = None
    if keyed and n:
        window = None
        if rule is not None:
            cleanable = _records_below(heads, rule.clean_upto_offset)
            dirty = min(_records_below(heads, rule.dirty_start_offset), n)
            window = (dirty, max(cleanable, dirty))
        p1 = pass1([_NamedHashes(i.file.object_key, h) for (_, h, _), i
                    in zip(heads, inputs, strict=True)], window, capacity, spool)
        if rule is not None:
            if rule.whole_log:
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
                log.warning("%s/%d: %d records with null keys on a compacted topic were kept",
                            topic, partition, p1.null_keys)
    for i in inputs:
        i.advance()  # every entry's hashes were read (or are skipped): its CRC is checked
    after_pass1(tp)
    # ---- pass 2: survivors from stream B, in the same order, one chunk's records at a time.
    builder: ChunkBuilder | None = None
    run = _OutputRun()
    start = 0  # position of the chunk's first record among the partition's
    for (ci, _, base), cnt, i in zip(heads, counts, inputs, strict=True):
        batches = i.read_batches(ci)
        offsets = _offsets_of(ci, base)
        all_hashes, keep = p1.take(cnt) if p1 is not None else (b"", np.ones(cnt, np.bool_))
        stats.duplicates_dropped += int(cnt - np.count_nonzero(keep))
        tomb_mask = tomb_cleaned = None  # the chunk's tombstones (None: it has none)
        if keyed and len(ci.tombstones):
            tomb_mask = np.zeros(cnt, dtype=np.bool_)
            tomb_cleaned = np.zeros(cnt, dtype=np.int64)
            rel = np.frombuffer(ci.tombstones.to_array(), dtype=np.uint32).astype(np.int64)
            where = np.searchsorted(offsets, rel + base)
            tomb_mask[where] = True
            tomb_cleaned[where] = ci.tombstone_cleaned_at
        if (tomb_mask is not None and tomb_cleaned is not None and p1 is not None
                and rule is not None and rule.whole_log):
            # Kafka's delete horizon: a tombstone goes once delete.retention.ms passed
            # since a whole-log clean first retained it; only inside the cleaned range.
            in_range = np.zeros(cnt, dtype=np.bool_)
            in_range[: max(0, p1.map_end - start)] = True
            tomb_drop = (
                keep & tomb_mask & in_range & (tomb_cleaned > 0)
                & (tomb_cleaned + rule.delete_retention_ms <= now_ms)
            )
            keep &= ~tomb_drop
            stats.tombstones_dropped += int(np.count_nonzero(tomb_drop))
            # Tombstones retained now get their first-cleaned time.
            fresh = keep & tomb_mask & (tomb_cleaned == 0) & in_range
            tomb_cleaned[fresh] = now_ms
        start += cnt
        sel = np.flatnonzero(keep)
        if not len(sel):
            continue
        # The chunk's survivors' index data, sliced into the runs its batches go to.
        c_rel = offsets[sel] - out_base
        c_hashes = np.frombuffer(all_hashes, dtype="V16")[sel] if keyed else None
        c_tombs = None if tomb_mask is None else tomb_mask[sel]
        c_times = None if tomb_cleaned is None else tomb_cleaned[sel]
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
                run.add_index(c_rel, c_hashes, c_tombs, c_times, taken, seen)
                taken = seen
                if builder is None:
                    builder = out.writer.open_chunk(topic, partition, base_offset=out_base,
                                                    keyed=keyed)
                stats.records_out += run.flush(builder)
                holding = False
        if pos != cnt:
            raise RuntimeError(f"{topic}/{partition}: batches hold {pos} records,"
                               f" index says {cnt}")
        if seen > taken:
            run.add_index(c_rel, c_hashes, c_tombs, c_times, taken, seen)
    if run.raws:
        if builder is None:
            builder = out.writer.open_chunk(topic, partition, base_offset=out_base, keyed=keyed)
        stats.records_out += run.flush(builder)
    if builder is not None:
        chunk = builder.finish()
        out.writer.add(chunk)
        cleaned_ats = [s[2] for s in segs]
        if rule is not None and rule.whole_log:
            cleaned_at: int | None = now_ms
        elif all(c is not None for c in cleaned_ats):
            cleaned_at = max(c for c in cleaned_ats if c is not None)
        else:
            cleaned_at = None
        out.chunks.append(OutputChunkInfo(tp, out_base, out_last, cleaned_at))

