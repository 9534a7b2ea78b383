"""Fetch (key 1): stored batches returned as bytes, long-polling for new commits.

Per partition: the live segments from the fetch offset (one metadata query), each read whole
through the segment cache (one ranged GET shared by every consumer), its batches' baseOffset
patched from relative to absolute and partitionLeaderEpoch set to -1 — per batch, never per
record. Batches wholly below the fetch offset are skipped; compaction gaps need nothing (the
offsets are simply absent). Limits as Kafka: partition_max_bytes per partition, max_bytes per
response, but the first batch of the first non-empty partition is returned whole even if it
is larger, so a consumer always makes progress. Below the log start or past the high
watermark: OFFSET_OUT_OF_RANGE. With fewer than min_bytes, the fetch waits up to max_wait for
the next data commit of any agent on the metadata store (an asyncio event set by this agent's
flushes and by the metadata store's commit watcher, metadata/notify.py; not a sleep loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from fileformat.batch import (
    LAST_OFFSET_DELTA_POS,
    LEADER_EPOCH_POS,
    LENGTH_POS,
    LOG_OVERHEAD,
)
from metadata import PartitionInfo
from metadata.errors import OffsetOutOfRangeError, UnknownPartitionError, UnknownTopicError

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

SEGMENTS_PER_QUERY = 32
_BASE = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_EPOCH = struct.Struct(">i")
_LAST_DELTA = struct.Struct(">i")


@dataclass(slots=True)
class PartitionRead:
    """What one partition contributes to a fetch response."""

    index: int
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start: int = -1
    records: bytes | bytearray = b""  # written to the response as is (no copy to bytes)


def patch_batches(out: bytearray, data: bytes, base: int, from_offset: int, budget: int,
                  first: bool) -> bool:
    """Append to `out` a segment's batches that end at or after `from_offset`, at absolute
    offsets, within `budget` bytes of `out` (the first batch always, if `first` and `out` is
    empty). Returns whether the budget stopped it."""
    view = memoryview(data)  # slices of it are appended without an intermediate copy
    pos, end = 0, len(data)
    while pos + LOG_OVERHEAD <= end:
        total = _LENGTH.unpack_from(data, pos + LENGTH_POS)[0] + LOG_OVERHEAD
        rel = _BASE.unpack_from(data, pos)[0]
        last = base + rel + _LAST_DELTA.unpack_from(data, pos + LAST_OFFSET_DELTA_POS)[0]
        if last >= from_offset:
            if len(out) + total > budget and not (first and not out):
                return True
            start = len(out)
            out += view[pos:pos + total]
            _BASE.pack_into(out, start, base + rel)
            _EPOCH.pack_into(out, start + LEADER_EPOCH_POS, -1)
        pos += total
    return False


def read_partition(ctx: ServerContext, topic: str, p: Any, offsets: dict[int, PartitionInfo],
                   budget: int, first: bool) -> PartitionRead:
    """Read one partition from its fetch offset (blocking: runs in the pool)."""
    index, offset = int(p.partition), int(p.fetch_offset)
    info = offsets.get(index)
    if info is None:
        return PartitionRead(index, ErrorCode.unknown_topic_or_partition)
    read = PartitionRead(index, high_watermark=info.next_offset,
                         log_start=info.log_start_offset)
    if offset < info.log_start_offset or offset > info.next_offset:
        read.error = ErrorCode.offset_out_of_range
        return read
    budget = min(budget, int(p.partition_max_bytes))
    out = bytearray()
    position = offset
    while position < info.next_offset:
        try:
            segments = ctx.metadata.find_segments(topic, index, position,
                                                  limit=SEGMENTS_PER_QUERY)
        except OffsetOutOfRangeError:  # retention moved the log start meanwhile
            read.error = ErrorCode.offset_out_of_range
            return read
        for seg in segments:
            full = patch_batches(out, ctx.cache.get(seg), seg.base_offset, position, budget,
                                 first)
            if full:
                read.records = out
                return read
            position = seg.last_offset + 1
        if len(segments) < SEGMENTS_PER_QUERY:
            break
    read.records = out
    return read


def read_all(ctx: ServerContext, request: Any) -> list[tuple[str, list[PartitionRead]]]:
    """One pass over every requested partition within max_bytes (runs in the pool)."""
    budget = int(request.max_bytes)
    results: list[tuple[str, list[PartitionRead]]] = []
    first = True
    for t in request.topics:
        try:
            offsets = {pi.partition: pi for pi in ctx.metadata.partitions(t.topic)}
        except (UnknownTopicError, UnknownPartitionError):
            offsets = {}
        reads = []
        for p in t.partitions:
            read = read_partition(ctx, t.topic, p, offsets, max(budget, 0), first)
            budget -= len(read.records)
            first = first and not read.records
            reads.append(read)
        results.append((t.topic, reads))
    return results


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    min_bytes = int(request.min_bytes)
    while True:
        woken = ctx.committed()  # before reading: a commit during the read is not missed
        results = await ctx.run(read_all, ctx, request)
        size = sum(len(r.records) for _, reads in results for r in reads)
        errors = any(r.error for _, reads in results for r in reads)
        remaining = deadline - loop.time()
        if size >= min_bytes or errors or remaining <= 0 or ctx.stopping:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), remaining)
    return b("FetchResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
             session_id=i32(0), responses=tuple(
                 b("FetchableTopicResponse", topic=topic, partitions=tuple(
                     b("PartitionData", partition_index=i32(r.index), error_code=r.error,
                       high_watermark=i64(r.high_watermark),
                       last_stable_offset=i64(r.high_watermark),
                       log_start_offset=i64(r.log_start), aborted_transactions=(),
                       preferred_read_replica=i32(-1), records=r.records)
                     for r in reads))
                 for topic, reads in results))
