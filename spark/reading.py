"""What `format("silt")` reads, in batch and streaming queries alike: Spark's Kafka source
schema, reads planned per object, and records handed to Spark as Arrow batches.

A read is a set of `Wanted` segments (a segment and the offsets wanted from it). `plan_reads`
groups them by object: the wanted segments of one object are read with ranged GETs of just
their bytes, neighbours closer than `COALESCE_GAP` merged into one GET. An agent's object
holds a chunk per partition in (topic, partition) order, so every partition of a topic that
one object holds, wanted from that object, costs ONE GET however many partitions it holds;
partitions wanted apart (another topic's chunks between them, wider than the gap) cost one
GET per run. Ranges are packed into Spark tasks of up to `TASK_BYTES`.

Each GET is verified per segment as `silt consume` verifies it (batch CRCs, the framing CRC
and counts recorded at commit). Offsets removed by compaction are simply absent (a compacted
topic is read through its gaps); control batches (transaction markers) are not records. An
object removed since the plan (compacted, then collected by GC after its grace period) is
read again from the segments live now: the same offsets, wherever they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from agent.reader import live_segments
from fileformat import Record, chunk_batches
from fileformat.batch import iter_records
from fileformat.errors import naming
from metadata import AbortedTxn, MetadataStore, SegmentInfo
from metadata.errors import OffsetOutOfRangeError
from metadata.segments import expected_index
from objectstore import ObjectStore

from .errors import DataLossError

# Wanted segments of one object less than this many bytes apart are read with one GET: a
# GET's price is that of ~1 MiB moved within a region, and the gap is mostly other
# partitions' chunks of the same flush.
COALESCE_GAP = 1 << 20
# One Spark task reads ranges of up to this many bytes (one range may be larger).
TASK_BYTES = 64 << 20
# Rows per Arrow batch handed to Spark.
ARROW_ROWS = 8192


def read_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema: key, value, topic, partition, offset, timestamp,
    timestampType (0 CreateTime, 1 LogAppendTime), and headers (array of key/value
    structs, repeated names kept) only with `includeHeaders`, as Kafka's."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


@dataclass(frozen=True)
class Wanted:
    """The offsets [lo, hi) wanted from one segment (hi None: to the segment's end), less
    the batches of the `aborted` transactions (a read_committed read's)."""

    seg: SegmentInfo
    lo: int
    hi: int | None = None
    aborted: tuple[AbortedTxn, ...] = ()

    def keeps(self, offset: int) -> bool:
        return offset >= self.lo and (self.hi is None or offset < self.hi)


@dataclass(frozen=True)
class RangeRead:
    """One ranged GET of an object, [start, end), holding the wanted segments in order."""

    key: str
    start: int
    end: int
    wanted: tuple[Wanted, ...]


class ReadTask(InputPartition):
    """The ranged GETs one Spark task makes."""

    def __init__(self, reads: Sequence[RangeRead]) -> None:
        super().__init__(tuple(reads))
        self.reads = tuple(reads)

    @property
    def size(self) -> int:
        return sum(r.end - r.start for r in self.reads)


def coalesce(wanted: Iterable[Wanted], gap: int = COALESCE_GAP) -> list[RangeRead]:
    """The ranged GETs that read `wanted`: per object, segments in position order, merged
    while the bytes between them are fewer than `gap`."""
    reads: list[RangeRead] = []
    ordered = sorted(wanted, key=lambda w: (w.seg.object_key, w.seg.data_pos))
    for key, group in groupby(ordered, key=lambda w: w.seg.object_key):
        run: list[Wanted] = []
        start = end = 0
        for w in group:
            if run and w.seg.data_pos - end > gap:
                reads.append(RangeRead(key, start, end, tuple(run)))
                run = []
            if not run:
                start = w.seg.data_pos
            run.append(w)
            end = max(end, w.seg.data_pos + w.seg.data_len)
        if run:
            reads.append(RangeRead(key, start, end, tuple(run)))
    return reads


def plan_reads(wanted: Iterable[Wanted], *, gap: int = COALESCE_GAP,
               task_bytes: int = TASK_BYTES) -> list[ReadTask]:
    """`wanted` as Spark tasks: the coalesced GETs packed, in object order, into tasks of up
    to `task_bytes` (a larger GET is a task of its own)."""
    tasks: list[ReadTask] = []
    batch: list[RangeRead] = []
    size = 0
    for read in coalesce(wanted, gap):
        n = read.end - read.start
        if batch and size + n > task_bytes:
            tasks.append(ReadTask(batch))
            batch, size = [], 0
        batch.append(read)
        size += n
    if batch:
        tasks.append(ReadTask(batch))
    return tasks


# One record as read: its segment (topic, partition), its batch's timestamp type, itself.
ReadRecord = tuple[SegmentInfo, int, Record]
# Finds the segments live now for a Wanted whose object is gone (see `refind`).
Refind = Callable[[Wanted], list[Wanted]]


def segment_records(seg: SegmentInfo, data: Any, aborted: Sequence[AbortedTxn] = ()
                    ) -> Iterator[tuple[int, Record]]:
    """A segment's records (timestamp type, record), absolute offsets, every batch verified
    against what its commit recorded before the first is yielded; control batches
    skipped, and the transactional batches of `aborted` transactions (those of its
    producer from its first offset to its ABORT marker), as a read_committed Kafka consumer
    skips them. A FormatError names the object."""
    with naming(seg.object_key):
        for header, view in chunk_batches(data, expected_index(seg)):
            if header.is_control:
                continue
            if aborted and header.is_transactional:
                at = seg.base_offset + header.base_offset
                if any(a.producer_id == header.producer_id
                       and a.first_offset <= at <= a.last_offset for a in aborted):
                    continue
            ts_type = header.timestamp_type
            for rec in iter_records(view, header, seg.base_offset):
                yield ts_type, rec


def read_task(store: ObjectStore, task: ReadTask, refind: Refind) -> Iterator[ReadRecord]:
    """The wanted records of a task, GET by GET. A GET of an object gone since the plan
    reads the same offsets from the segments `refind` finds live now."""
    for read in task.reads:
        try:
            data = memoryview(store.get_range(read.key, read.start, read.end))
        except FileNotFoundError:
            for w in read.wanted:
                for again in refind(w):
                    seg = again.seg
                    chunk = store.get_range(seg.object_key, seg.data_pos,
                                            seg.data_pos + seg.data_len)
                    yield from _wanted_records(again, chunk)
            continue
        for w in read.wanted:
            at = w.seg.data_pos - read.start
            yield from _wanted_records(w, data[at:at + w.seg.data_len])


def _wanted_records(w: Wanted, data: Any) -> Iterator[ReadRecord]:
    for ts_type, rec in segment_records(w.seg, data, w.aborted):
        if w.keeps(rec.offset):
            yield w.seg, ts_type, rec


def wanted_from(segments: Iterable[SegmentInfo], lo: int, hi: int | None,
                aborted: Sequence[AbortedTxn] = ()) -> list[Wanted]:
    """The segments holding offsets in [lo, hi), each with that window (and the aborted
    transactions a read_committed read skips)."""
    return [Wanted(s, lo, hi, tuple(aborted)) for s in segments
            if s.last_offset >= lo and (hi is None or s.base_offset < hi)]


def refinder(metadata_url: str, fail_on_data_loss: bool) -> Refind:
    """A `Refind` over the metadata store at `metadata_url` (opened on first use): the live
    segments holding the Wanted's offsets. Offsets gone below the log start since (retention,
    DeleteRecords) are DataLossError if `fail_on_data_loss`, else skipped."""

    @functools.cache
    def md() -> MetadataStore:
        return MetadataStore.open(metadata_url)

    def refind(w: Wanted) -> list[Wanted]:
        seg = w.seg
        try:
            found = list(live_segments(md(), seg.topic, seg.partition, w.lo))
            lo = w.lo
        except OffsetOutOfRangeError as exc:
            if fail_on_data_loss:
                raise DataLossError(f"{seg.topic}/{seg.partition}: {exc}; set failOnDataLoss"
                                    " to false to skip what was removed") from exc
            start = next(p.log_start_offset for p in md().partitions(seg.topic)
                         if p.partition == seg.partition)
            found, lo = list(live_segments(md(), seg.topic, seg.partition, start)), start
        hi = seg.last_offset + 1 if w.hi is None else min(w.hi, seg.last_offset + 1)
        return wanted_from(found, lo, hi, w.aborted)

    return refind


@functools.cache
def _arrow_schema(include_headers: bool) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(read_schema(include_headers), timezone="UTC")


def arrow_batches(records: Iterable[ReadRecord], include_headers: bool,
                  rows: int = ARROW_ROWS) -> Iterator[Any]:
    """Records as Arrow record batches in `read_schema(include_headers)`'s layout (what a
    Python data source's read may return instead of tuples: no per-row conversion in
    Spark)."""
    import pyarrow as pa

    schema = _arrow_schema(include_headers)
    it = iter(records)
    while True:
        cols: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [])
        keys, values, topics, parts, offsets, stamps, types, headers = cols
        for seg, ts_type, rec in it:
            keys.append(rec.key)
            values.append(rec.value)
            topics.append(seg.topic)
            parts.append(seg.partition)
            offsets.append(rec.offset)
            stamps.append(rec.timestamp * 1000)
            types.append(ts_type)
            if include_headers:
                headers.append([{"key": k, "value": v} for k, v in rec.headers])
            if len(keys) >= rows:
                break
        if not keys:
            return
        arrays = [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=False)]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        if len(keys) < rows:
            return
