"""ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4,
the log start: nothing is tiered), latest tiered (-5: none, offset -1), or by timestamp.
v10's timeout_ms bounds a remote lookup Kafka may make; every lookup here is the same.

Earliest is the log start, latest the high watermark (next offset), or under
read_committed (v2+) the last stable offset, where a lookup by timestamp also finds nothing
at or past it, as Kafka's Partition.fetchOffsetForTimestamp. By timestamp: the first
record with timestamp >= T, found from the segments' recorded max timestamps and the batch
headers' max timestamps; only the one batch that holds it is decoded. Max timestamp: the
record with the largest timestamp (the first such), found the same way. Leader epoch -1.
A topic the client may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED per partition.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets import v1, v2, v3, v4, v5, v6, v7, v8, v9, v10
from kio.static.primitive import i32, i64
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from fileformat import iter_batches
from fileformat.batch import iter_records
from metadata import MetadataStore, SegmentInfo
from metadata.errors import UnknownTopicError

from ...reader import live_segments
from ..cache import SegmentCache
from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from .fetch import READ_COMMITTED

Request = (v1.ListOffsetsRequest | v2.ListOffsetsRequest | v3.ListOffsetsRequest
           | v4.ListOffsetsRequest | v5.ListOffsetsRequest | v6.ListOffsetsRequest
           | v7.ListOffsetsRequest | v8.ListOffsetsRequest | v9.ListOffsetsRequest
           | v10.ListOffsetsRequest)
"""kio's ListOffsetsRequest of each version served (1-10)."""


LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
# KIP-405's earliest local offset (v8+) and KIP-1005's latest tiered offset (v9+): with no
# tiering (the object store is the only storage) Kafka answers the log start, and -1.
EARLIEST_LOCAL, LATEST_TIERED = -4, -5
Looked = tuple[int, ErrorCode, int, int]  # partition, error, timestamp, offset


def _segments(metadata: MetadataStore, topic: str, partition: int,
              start: int) -> list[SegmentInfo]:
    """Every live segment of the partition from `start` (paged metadata queries)."""
    return list(live_segments(metadata, topic, partition, start))


def _first_at(cache: SegmentCache, seg: SegmentInfo, wanted: int,
              exact: bool) -> tuple[int, int] | None:
    """(timestamp, offset) of the segment's first record with timestamp >= wanted (== if
    exact); decodes only the batch that holds it."""
    data = cache.get(seg)  # absolute offsets
    for header, view in iter_batches(data):
        if header.max_timestamp < wanted:
            continue
        for rec in iter_records(view, header):
            if rec.timestamp == wanted or (not exact and rec.timestamp > wanted):
                return rec.timestamp, rec.offset
    return None


def offset_for_time(metadata: MetadataStore, cache: SegmentCache, topic: str,
                    partition: int, start: int, timestamp: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the partition's first record at or after offset `start`
    whose timestamp is >= `timestamp` (>= 0), or None if there is none (ListOffsets by
    timestamp; `silt groups reset-offsets --to-datetime`)."""
    segments = [s for s in _segments(metadata, topic, partition, start) if s.record_count]
    seg = next((s for s in segments if s.max_timestamp >= timestamp), None)
    return None if seg is None else _first_at(cache, seg, timestamp, exact=False)


def lookup(ctx: ServerContext, topic: str, partition: int, timestamp: int,
           offsets: dict[int, tuple[int, int]],
           stable: dict[int, int] | None = None) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) for one partition (blocking: runs in the pool); with
    `stable` (read_committed: each partition's last stable offset) latest is that offset
    and a lookup by timestamp finds nothing at or past it (Kafka's lastFetchableOffset)."""
    if partition not in offsets:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    start, end = offsets[partition]
    if stable is not None:
        end = stable[partition]
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.none, -1, start
    if timestamp == LATEST_TIERED:
        return ErrorCode.none, -1, -1
    if timestamp == LATEST:
        return ErrorCode.none, -1, end
    if timestamp == MAX_TIMESTAMP:
        segments = [s for s in _segments(ctx.metadata, topic, partition, start)
                    if s.record_count]
        if not segments:
            return ErrorCode.none, -1, -1
        top = max(s.max_timestamp for s in segments)
        seg = next(s for s in segments if s.max_timestamp == top)
        found = _first_at(ctx.cache, seg, top, exact=True)
    elif timestamp < 0:
        return ErrorCode.invalid_request, -1, -1
    else:
        found = offset_for_time(ctx.metadata, ctx.cache, topic, partition, start, timestamp)
        if found is not None and stable is not None and found[1] >= end:
            found = None  # inside an open transaction: not fetchable under read_committed
    if found is None:
        return ErrorCode.none, -1, -1
    return ErrorCode.none, found[0], found[1]


def lookup_all(ctx: ServerContext, request: Request, described: set[str]
               ) -> list[tuple[str, list[Looked]]]:
    """Each partition's answer; topics not in `described` (no DESCRIBE on them) answer
    TOPIC_AUTHORIZATION_FAILED, as KafkaApis does, without being looked up."""
    results: list[tuple[str, list[Looked]]] = []
    committed = int(getattr(request, "isolation_level", 0)) == READ_COMMITTED
    for t in request.topics:
        if t.name not in described:
            results.append((t.name, [(int(p.partition_index),
                                      ErrorCode.topic_authorization_failed, -1, -1)
                                     for p in t.partitions]))
            continue
        try:
            infos = ctx.metadata.partitions(t.name)
        except UnknownTopicError:
            infos = []
        offsets = {pi.partition: (pi.log_start_offset, pi.next_offset) for pi in infos}
        stable = {pi.partition: pi.last_stable_offset for pi in infos} if committed else None
        results.append((t.name, [(int(p.partition_index),
                                  *lookup(ctx, t.name, int(p.partition_index),
                                          int(p.timestamp), offsets, stable))
                                 for p in t.partitions]))
    return results


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    described = ctx.authz.allowed(Operation.DESCRIBE, ResourceType.TOPIC,
                                  (t.name for t in request.topics))
    results = await ctx.run(lookup_all, ctx, request, described)
    return b("ListOffsetsResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b("ListOffsetsTopicResponse", name=name, partitions=tuple(
            b("ListOffsetsPartitionResponse", partition_index=i32(index), error_code=error,
              timestamp=i64(ts), offset=i64(offset), leader_epoch=i32(-1))
            for index, error, ts, offset in parts))
        for name, parts in results))
