"""Run one compaction job's data path: read inputs with two streams each, write outputs.

For every input file we open exactly two forward-only streams (two GET requests), however
many partitions it holds: stream A over the META section (index entries + key hashes,
pass 1) and stream B over the DATA section (record batches, pass 2). All inputs are walked
partition by partition in the common (topic, partition) order; no stream seeks back or is
reopened. Per compacted partition, pass 1 decides the survivors from the key hashes alone
(`dedupe`), then pass 2 copies surviving batches byte for byte and rewrites partially
surviving ones from their survivors' record bytes (`filter_batch`: new header, same base
offset, so every offset is unchanged), compressed with the topic's rewrite codec (Kafka's
topic `compression.type`; `producer`: the input batch's own codec). Compacted-topic data
and delete-policy data go to two different output objects, each streamed to the store
(multipart when large).
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
    FileWriter,
    Readable,
    iter_batches,
    iter_meta,
)
from fileformat.batch import filter_batch
from fileformat.errors import naming
from fileformat.objectfile import DataReader
from objectstore import ObjectStore

from .dedupe import MAP_BYTES_PER_KEY, dedupe, split_hashes

log = logging.getLogger(__name__)

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
        self._meta: Iterator[tuple[ChunkIndex, bytes]] = iter_meta(
            meta, f.meta_offset, f.meta_length
        )
        self._data = DataReader(data, f.data_offset)
        self.head: tuple[ChunkIndex, bytes] | None = None
        self.advance()

    # Every read of the input names its object in a FormatError (a corrupt input fails
    # the job with the key in its error, and nothing built from it is committed).

    def advance(self) -> None:
        with naming(self.file.object_key):
            self.head = next(self._meta, None)

    def read_chunk(self, index: ChunkIndex) -> bytes:
        with naming(self.file.object_key):
            return self._data.read_chunk(index)

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
) -> MergeStats:
    """Merge `inputs` into the outputs created on demand by `compacted_out`/`delete_out`.

    `codecs` gives, per topic, the codec partially surviving batches are rewritten in;
    None or a missing topic: each keeps its input codec (Kafka's `producer`). `open_input`
    opens each input's two sections (default: two streams, two GETs per file).
    """
    stats = MergeStats(input_files=len(inputs))
    capacity = max(1, memory_budget // MAP_BYTES_PER_KEY)
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
                _merge_partition(
                    tp, live, target(compacted), compacted, rules.get(tp), stats,
                    capacity=capacity, now_ms=now_ms, codec=(codecs or {}).get(tp[0]),
                )
                stats.partitions += 1
            heartbeat()
        for i in opened:
            i.finish()
    return stats


def _merge_partition(
    tp: TopicPartition,
    inputs: list[_Input],
    out: OutputTarget,
    compacted: bool,
    rule: PartitionRule | None,
    stats: MergeStats,
    *,
    capacity: int,
    now_ms: int,
    codec: Compression | None,
) -> None:
    """Pass 1 over the META heads of `inputs`, then pass 2 over their DATA streams."""
    topic, partition = tp
    segs = [i.file.segments[tp] for i in inputs]
    out_base = segs[0][0]
    out_last = max(s[1] for s in segs)
    # ---- pass 1: (absolute offset, key hash) of every record, from stream A only.
    heads: list[tuple[ChunkIndex, bytes, int]] = []
    for i, seg in zip(inputs, segs, strict=True):
        assert i.head is not None
        ci, hashes = i.head
        heads.append((ci, hashes, seg[0]))
        i.advance()
    keyed = compacted and all(ci.keyed for ci, _, _ in heads)
    counts = [ci.record_count for ci, _, _ in heads]
    n = sum(counts)
    stats.records_in += n
    keep = np.ones(n, dtype=np.bool_)
    tomb_drop = np.zeros(n, dtype=np.bool_)
    offsets = np.concatenate([_offsets_of(ci, base) for ci, _, base in heads]) if n else (
        np.zeros(0, dtype=np.int64))
    tomb_mask = np.zeros(n, dtype=np.bool_)
    tomb_cleaned = np.zeros(n, dtype=np.int64)
    all_hashes = b""
    if keyed and n:
        all_hashes = b"".join(h for _, h, _ in heads)
        start = 0
        for (ci, _, base), cnt in zip(heads, counts, strict=True):
            if len(ci.tombstones):
                rel = np.frombuffer(ci.tombstones.to_array(), dtype=np.uint32).astype(np.int64)
                where = start + np.searchsorted(offsets[start : start + cnt], rel + base)
                tomb_mask[where] = True
                tomb_cleaned[where] = ci.tombstone_cleaned_at
            start += cnt
        if rule is not None:
            hi, lo = split_hashes(all_hashes)
            cleanable = int(np.searchsorted(offsets, rule.clean_upto_offset, side="left"))
            dirty = int(np.searchsorted(offsets, rule.dirty_start_offset, side="left"))
            result = dedupe(hi, lo, cleanable, capacity, dirty)
            if rule.whole_log:
                # The whole log was rewritten against the map: the dirty records up to the
                # map's end are now clean (Kafka's cleaner checkpoint advances the same way).
                stats.checkpoints[tp] = (int(offsets[result.map_end])
                                         if result.map_end < n else out_last + 1)
            keep = result.keep
            stats.duplicates_dropped += int(n - np.count_nonzero(keep))
            if result.map_end < cleanable:
                stats.partial_cleans += 1
                log.info("%s/%d: offset map full after %d keys; partial clean up to offset %d",
                         topic, partition, result.distinct_keys, int(offsets[result.map_end]))
            if result.null_keys:
                stats.null_keys_kept += result.null_keys
                log.warning("%s/%d: %d records with null keys on a compacted topic were kept",
                            topic, partition, result.null_keys)
            if rule.whole_log:
                # Kafka's delete horizon: a tombstone goes once delete.retention.ms passed
                # since a whole-log clean first retained it; only inside the cleaned range.
                in_range = np.zeros(n, dtype=np.bool_)
                in_range[: result.map_end] = True
                tomb_drop = (
                    keep & tomb_mask & in_range & (tomb_cleaned > 0)
                    & (tomb_cleaned + rule.delete_retention_ms <= now_ms)
                )
                keep &= ~tomb_drop
                stats.tombstones_dropped += int(np.count_nonzero(tomb_drop))
                # Tombstones retained now get their first-cleaned time.
                fresh = keep & tomb_mask & (tomb_cleaned == 0) & in_range
                tomb_cleaned[fresh] = now_ms
    # ---- pass 2: survivors from stream B, in the same order.
    builder: ChunkBuilder | None = None
    start = 0
    for (ci, _, base), cnt, i in zip(heads, counts, inputs, strict=True):
        data = i.read_chunk(ci)
        k = keep[start : start + cnt]
        if not k.any():
            start += cnt
            continue
        pos = start
        for header, view in iter_batches(data):
            bn = header.record_count
            bk = keep[pos : pos + bn]
            if bk.any():
                if builder is None:
                    builder = out.writer.open_chunk(
                        topic, partition, base_offset=out_base, keyed=keyed,
                    )
                rel = offsets[pos : pos + bn] - out_base
                sel = np.flatnonzero(bk)
                new_base: int = header.base_offset + base - out_base
                if bk.all():
                    raw = bytes(view)
                    stats.batches_copied += 1
                else:
                    # Survivors' record bytes are copied as they are; the batch keeps its
                    # base offset and timestamp, so their deltas (offsets) stay valid.
                    raw = filter_batch(view, header, sel.tolist(), compression=(
                        header.compression if codec is None else codec))
                    stats.batches_reencoded += 1
                hashes = b""
                tombs: Any = ()
                tomb_times: Any = None
                if keyed:
                    idx = pos + sel
                    hv = np.frombuffer(all_hashes, dtype="V16")
                    hashes = hv[idx].tobytes()
                    tsel = tomb_mask[idx]
                    tombs = rel[sel][tsel]
                    tomb_times = tomb_cleaned[idx][tsel]
                builder.append_compacted(
                    raw, base=new_base, offsets=rel[sel], tombstones=tombs, key_hashes=hashes,
                    tombstone_cleaned_at=tomb_times,
                )
                stats.records_out += len(sel)
            pos += bn
        if pos != start + cnt:
            raise RuntimeError(f"{topic}/{partition}: batches hold {pos - start} records,"
                               f" index says {cnt}")
        start += cnt
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

