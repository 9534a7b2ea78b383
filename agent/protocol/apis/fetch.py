"""Fetch (key 1): stored batches returned as bytes, long-polling for new commits.

Every partition's offsets (log start, high watermark, last stable offset) and first live
segments from its fetch offset come from ONE metadata statement for all topics
(`MetadataStore.partitions_from`), or from none: partitions whose offsets this agent read
since the last commit notification and that have nothing to read are answered from those
(agent/protocol/states.py), so a long-poll of caught-up partitions reads nothing, and is
answered on the event loop itself (no hop to the I/O pool). A long-poll waits parked
(agent/protocol/states.py): a commit notification starts one read of the offsets of every
parked partition, which wakes only the long-polls whose partitions moved (only those with
records to read then go to the pool), and one that expires with nothing moved answers what
it read, without a second look. Partitions far behind, needing more segments than those
first ones, have the rest read in one more statement for all of them (`_Pages`), not one
per partition. Each segment is
read whole through the segment cache (one ranged GET shared by every consumer), which keeps
them as served: baseOffsets absolute, partitionLeaderEpoch -1 (patched once per segment read, per
batch, never per record). A fetch sends views of those cached bytes — one per segment, not
per batch — after the response fields it writes itself (FetchResponse v4-v17 in wire bytes,
checked equal to kio's encoding by tests/protocol/test_fetch_response.py), so past the cache
a record byte is copied by no one but the kernel (agent/protocol/writev.py). Batches wholly
below the fetch offset are skipped; compaction gaps need nothing (the offsets are simply
absent). Limits as Kafka: partition_max_bytes per partition, max_bytes per response, itself
at most the agent's fetch.max.bytes (Kafka's broker setting, 55 MiB), but the first batch of
the first non-empty partition is returned whole even if it is larger (KIP-74), so a consumer
always makes progress. A partition named twice is read and answered once (`requested`), as
Kafka collapses a request's partitions. Below the log start or past the high watermark:
OFFSET_OUT_OF_RANGE. With fewer than min_bytes, the fetch waits up to max_wait for a data
commit of any agent to move one of its partitions (this agent's flushes and the metadata
store's commit watcher notify, metadata/notify.py; not a sleep loop).

isolation_level read_committed (1) returns only the batches below each partition's last
stable offset (the first offset of its oldest open transaction, else the high watermark: a
batch boundary, so a segment is cut there, never a batch), with the aborted transactions
overlapping what it returns (one more metadata statement for all partitions, when records
are returned; Kafka's collectAbortedTxns), so the client drops their records; control
batches go as stored. last_stable_offset is sent under both levels, as Kafka. A long-poll
wakes when any offset of its partitions moves, the LSO included (a marker's commit), so a
fetch waiting for the LSO to move sees it move.

From v13 topics are named by id (KIP-516: `ServerContext.topic_id`): an id that names no
topic, or a topic deleted since, answers UNKNOWN_TOPIC_ID.

A partition that cannot be read answers, as Kafka's fetch path does, with an error and no
records, the others unaffected: UNKNOWN_TOPIC_OR_PARTITION when its topic was deleted
meanwhile, KAFKA_STORAGE_ERROR when the object store fails (retriable: the client fetches
again), UNKNOWN_SERVER_ERROR for anything else (the metadata store unreachable). A topic
the client may not READ answers TOPIC_AUTHORIZATION_FAILED (after UNKNOWN_TOPIC_ID, before
anything is read), as KafkaApis does.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from kio.schema.fetch import v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15, v16, v17
from kio.static.protocol import RequestHeader

import telemetry
from acl import Operation, ResourceType
from agent.errors import NotCachedError
from agent.quotas import FETCH as FETCH_QUOTA
from fileformat.batch import LAST_OFFSET_DELTA_POS, LENGTH_POS, LOG_OVERHEAD
from metadata import AbortedTxn, PartitionFrom, PartitionInfo, SegmentInfo
from metadata.errors import OffsetOutOfRangeError, UnknownTopicError

from ..codec import Buffer, Builder, Encoded, write_array_length, write_topic_head, write_uvarint
from ..context import ServerContext
from ..errors import FETCH, error_code, failed
from ..states import Key, Seen

Request = (v4.FetchRequest | v5.FetchRequest | v6.FetchRequest | v7.FetchRequest | v8.FetchRequest
           | v9.FetchRequest | v10.FetchRequest | v11.FetchRequest | v12.FetchRequest
           | v13.FetchRequest | v14.FetchRequest | v15.FetchRequest | v16.FetchRequest
           | v17.FetchRequest)
"""kio's FetchRequest of each version served (4-17)."""
Partition = (v4.request.FetchPartition | v5.request.FetchPartition | v6.request.FetchPartition
             | v7.request.FetchPartition | v8.request.FetchPartition | v9.request.FetchPartition
             | v10.request.FetchPartition | v11.request.FetchPartition | v12.request.FetchPartition
             | v13.request.FetchPartition | v14.request.FetchPartition
             | v15.request.FetchPartition | v16.request.FetchPartition
             | v17.request.FetchPartition)
# v13+ name topics by id (KIP-516), in requests and responses.
ById = (v13.request.FetchTopic | v14.request.FetchTopic | v15.request.FetchTopic
        | v16.request.FetchTopic | v17.request.FetchTopic)
TopicRef = str | uuid.UUID
"""A request's topic: its name (v4-v12) or its id (v13+)."""


SEGMENTS_PER_QUERY = 32
# Segments read per partition for all of a fetch's partitions at once: most fetches take a
# partition's next few segments; one that needs more pages on with SEGMENTS_PER_QUERY.
FIRST_SEGMENTS = 8
SHARED_TRIES = 2
# Shared reads a pass awaits before reading alone: a second only when a notification came
# during the first (which then kept nothing).
READ_COMMITTED = 1  # isolation_level: records below the last stable offset, and the
# aborted transactions among them (else aborted_transactions null, as Kafka sends)
_BASE = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LAST_DELTA = struct.Struct(">i")


class OffsetsNotKept(NotCachedError):
    """`cached_only`: only the offsets of `keys` are missing (none of the others has records
    to read), which a read shared with the other long-polls can fill
    (`PartitionStates.share`)."""

    def __init__(self, keys: list[Key]) -> None:
        super().__init__(f"the offsets of {len(keys)} partitions are not kept")
        self.keys = keys


@dataclass(slots=True)
class PartitionRead:
    """What one partition contributes to a fetch response."""

    index: int
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable: int = -1
    log_start: int = -1
    records: list[memoryview] = field(default_factory=list)  # views of cached segments
    size: int = 0  # bytes in `records`
    # read_committed: the aborted transactions overlapping the records sent (else None)
    aborted: list[AbortedTxn] | None = None
    row: int = -1  # the topic row whose partition was read (-1: none)


def span(data: bytearray, from_offset: int, room: int, take_first: bool,
         upto: int | None = None) -> tuple[int, int, bool]:
    """(start, end, stopped): the byte range of the batches of `data` (absolute offsets)
    that end at or after `from_offset` and (with `upto`, a read_committed fetch's last
    stable offset) begin below `upto`, within `room` bytes (the first such batch always,
    if `take_first`); `stopped` when the room, not the data, ended it."""
    end = len(data)
    pos = 0
    while pos + LOG_OVERHEAD <= end:  # skip the batches wholly below from_offset
        last = (_BASE.unpack_from(data, pos)[0]
                + _LAST_DELTA.unpack_from(data, pos + LAST_OFFSET_DELTA_POS)[0])
        if last >= from_offset:
            break
        pos += _LENGTH.unpack_from(data, pos + LENGTH_POS)[0] + LOG_OVERHEAD
    start = pos
    if upto is not None:  # the segment reaches the last stable offset: stop at it
        stop = pos
        while stop + LOG_OVERHEAD <= end and _BASE.unpack_from(data, stop)[0] < upto:
            stop += _LENGTH.unpack_from(data, stop + LENGTH_POS)[0] + LOG_OVERHEAD
        end = stop
    if end - start <= room:
        return start, end, False
    while pos + LOG_OVERHEAD <= end:
        total = _LENGTH.unpack_from(data, pos + LENGTH_POS)[0] + LOG_OVERHEAD
        if pos + total - start > room and not (take_first and pos == start):
            return start, pos, True
        pos += total
    return start, pos, False


def end_offset(view: memoryview) -> int:
    """The offset after the last batch of `view` (whole batches, absolute offsets)."""
    pos, last = 0, -1
    while pos + LOG_OVERHEAD <= len(view):
        last = (_BASE.unpack_from(view, pos)[0]
                + _LAST_DELTA.unpack_from(view, pos + LAST_OFFSET_DELTA_POS)[0])
        pos += _LENGTH.unpack_from(view, pos + LENGTH_POS)[0] + LOG_OVERHEAD
    return last + 1


def read_partition(ctx: ServerContext, topic: str, p: Partition, found: PartitionFrom,
                   budget: int, first: bool, committed: bool, pages: _Pages | None = None
                   ) -> PartitionRead:
    """Read one partition from its fetch offset (`committed`: read_committed, below the last
    stable offset), or its error without records (blocking: runs in the pool unless it has
    nothing to read). `found`: its offsets and first segments, read with the other
    partitions' (`partitions`); `pages`: where the segments past them are read (with the
    later partitions' when it can: `_Pages`); `budget`: what is left of the response's
    max_bytes."""
    index, offset, info = int(p.partition), int(p.fetch_offset), found.info
    stable = info.last_stable_offset
    read = PartitionRead(index, high_watermark=info.next_offset, last_stable=stable,
                         log_start=info.log_start_offset, row=found.topic_id)
    if offset < info.log_start_offset or offset > info.next_offset:
        read.error = ErrorCode.offset_out_of_range
        return read
    left = budget  # the response's, of which this partition may take its own max
    budget = min(budget, int(p.partition_max_bytes))
    limit = stable if committed else info.next_offset
    position = offset
    prefetched: list[SegmentInfo] | OffsetOutOfRangeError | None = found.segments
    while position < limit:
        try:
            if prefetched is not None:
                if isinstance(prefetched, OffsetOutOfRangeError):
                    raise prefetched
                page, segments, prefetched = FIRST_SEGMENTS, prefetched, None
            elif pages is not None:
                page, segments = pages.next(topic, index, position, budget - read.size,
                                            left - budget)
            else:
                page = SEGMENTS_PER_QUERY
                segments = ctx.metadata.find_segments(topic, index, position, limit=page)
        except OffsetOutOfRangeError as exc:  # retention moved the log start meanwhile
            read.error = error_code(exc, FETCH)
            read.records, read.size = [], 0
            return read
        for seg in segments:
            if seg.base_offset >= limit:
                return read
            data = ctx.cache.get(seg)
            start, end, full = span(data, position, budget - read.size,
                                    first and not read.size,
                                    limit if seg.last_offset >= limit else None)
            if end > start:
                read.records.append(memoryview(data)[start:end])
                read.size += end - start
            if full:
                return read
            position = seg.last_offset + 1
        if len(segments) < page:
            break
    return read


class _Pages:
    """The segments a fetch's partitions need past their first pages (`FIRST_SEGMENTS`,
    read with their offsets), read for several partitions in one statement: the partition
    that asks, and the later ones of the request that will need more too, as far as the
    response's max_bytes is likely to reach them (estimated from the sizes of the segments
    already listed: a partition left out, or read short, asks for its own when it gets
    there). Without it a fetch of many partitions that are far behind made one statement
    per partition. Each partition is still read in request order, whole pages at a time,
    from where it stands, so what a fetch returns is unchanged."""

    __slots__ = ("committed", "ctx", "order", "place", "read")

    def __init__(self, ctx: ServerContext, committed: bool, topics: list[_Topic],
                 found: dict[Key, PartitionFrom]) -> None:
        self.ctx, self.committed = ctx, committed
        # The request's partitions with segments listed, in its order, and their places.
        self.order: list[tuple[str, Partition, PartitionFrom]] = []
        self.place: dict[Key, int] = {}
        for t in topics:
            if t.reads is None:
                for p in t.partitions:
                    key = (t.name, int(p.partition))
                    f = found.get(key)
                    if f is not None and f.segments:
                        self.place[key] = len(self.order)
                        self.order.append((t.name, p, f))
        # Read ahead: a later partition's next segments (the offset they start at, the
        # page size asked, the segments).
        self.read: dict[Key, tuple[int, int, list[SegmentInfo] | OffsetOutOfRangeError]] = {}

    def next(self, topic: str, index: int, position: int, wanted: int, after: int
             ) -> tuple[int, list[SegmentInfo]]:
        """(the page size asked, the segments) of `topic`/`index` from `position`, where
        it wants `wanted` more bytes and the partitions after it may have at most `after`
        of the response. OffsetOutOfRangeError: below the log start now."""
        key = (topic, index)
        ahead = self.read.pop(key, None)
        if ahead is not None and ahead[0] == position:
            if isinstance(ahead[2], OffsetOutOfRangeError):
                raise ahead[2]
            return ahead[1], ahead[2]
        here = self.place[key]  # (a partition asks only once its listed segments are read)
        page = _needed(self.order[here][2].segments, wanted)
        ask = [(topic, index, position)]
        for later_topic, later_index, start, needed in self._later(here, after):
            ask.append((later_topic, later_index, start))
            page = max(page, needed)
        page = min(page, SEGMENTS_PER_QUERY)
        found = self.ctx.metadata.partitions_from(ask, limit=page)
        for later_topic, later_index, start in ask[1:]:
            f = found.get((later_topic, later_index))
            if f is not None:
                self.read[(later_topic, later_index)] = (start, page, f.segments)
        mine = found.get(key)
        if mine is None:  # gone meanwhile: its own read says how (unknown topic, partition)
            return page, self.ctx.metadata.find_segments(topic, index, position, limit=page)
        if isinstance(mine.segments, OffsetOutOfRangeError):
            raise mine.segments
        return page, mine.segments

    def _later(self, here: int, after: int) -> list[tuple[str, int, int, int]]:
        """The partitions after `here` whose first page will not be enough, with the offset
        their next segments start at and how many they likely need, while `after` (the
        bytes left for them, each taken as its most) lasts."""
        out = []
        for topic, p, found in self.order[here + 1:]:
            if after <= 0:
                break
            segments = found.segments
            if isinstance(segments, OffsetOutOfRangeError) or not segments:
                continue
            info, offset = found.info, int(p.fetch_offset)
            limit = info.last_stable_offset if self.committed else info.next_offset
            if not info.log_start_offset <= offset < limit:
                continue  # out of range, or nothing to read
            listed = _size(segments)
            most = min(after, int(p.partition_max_bytes))
            if (len(segments) >= FIRST_SEGMENTS and listed < most
                    and segments[-1].last_offset + 1 < limit):
                out.append((topic, int(p.partition), segments[-1].last_offset + 1,
                            _needed(segments, most - listed, listed)))
                after -= most
            else:
                after -= min(listed, most)
        return out


def _size(segments: list[SegmentInfo]) -> int:
    """The bytes of `segments`."""
    return sum([seg.data_len for seg in segments])


def _needed(listed: list[SegmentInfo] | OffsetOutOfRangeError, wanted: int,
            size: int | None = None) -> int:
    """How many more segments a partition likely needs for `wanted` more bytes, judged by
    the size of those `listed` (`size`: their bytes, if summed already; one more than that:
    the page then tells whether the log goes on)."""
    if isinstance(listed, OffsetOutOfRangeError) or not listed:
        return SEGMENTS_PER_QUERY
    each = max((_size(listed) if size is None else size) // len(listed), 1)
    return -(-wanted // each) + 1


def requested(request: Request) -> list[tuple[TopicRef, list[Partition]]]:
    """The request's partitions by topic (name, or id from v13), each (topic, partition)
    once, as Kafka's FetchRequest.fetchData collapses them (a LinkedHashMap: a repeated
    partition keeps its first place and takes its last entry's offsets and limits), then
    grouped as FetchResponse groups them: consecutive partitions of one topic in one topic
    entry."""
    wanted: dict[tuple[TopicRef, int], Partition] = {}
    for t in request.topics:
        ref = (t.topic_id or uuid.UUID(int=0)) if isinstance(t, ById) else t.topic
        for p in t.partitions:
            wanted[(ref, int(p.partition))] = p
    grouped: list[tuple[TopicRef, list[Partition]]] = []
    for (topic, _), p in wanted.items():
        if grouped and grouped[-1][0] == topic:
            grouped[-1][1].append(p)
        else:
            grouped.append((topic, [p]))
    return grouped


@dataclass(slots=True)
class _Topic:
    """A requested topic on its way through `read_all`: its name and, named by id, the
    topic row it must still be; or `reads` already answered (unknown id, not readable)."""

    ref: TopicRef
    partitions: list[Partition]
    name: str = ""
    row: int | None = None
    reads: list[PartitionRead] | None = None


Grouped = list[tuple[TopicRef, list[Partition]]]
"""A request's partitions as `requested` groups them."""


def fetch_offsets(grouped: Grouped) -> dict[tuple[TopicRef, int], int]:
    """Each requested partition's fetch offset."""
    return {(ref, int(p.partition)): int(p.fetch_offset)
            for ref, partitions in grouped for p in partitions}


def read_all(ctx: ServerContext, request: Request, grouped: Grouped,
             readable: Callable[[str], bool], quota_bytes: float = float("inf"),
             cached_only: bool = False) -> list[tuple[TopicRef, str, list[PartitionRead]]]:
    """One pass over every requested partition (`grouped`: `requested(request)`) within
    max_bytes, itself at most the agent's fetch.max.bytes and `quota_bytes` (what the
    client's fetch quota lets one window carry) (runs in the pool): (the request's topic,
    its name, reads).
    A topic id that names no topic (none has it, or that topic was deleted) answers
    UNKNOWN_TOPIC_ID for each of its partitions, as Kafka's fetch does; then a topic not
    `readable` (no READ on it) TOPIC_AUTHORIZATION_FAILED, before it is looked up. Every
    partition's offsets and first segments come from one metadata statement, or none
    (`partitions`). `cached_only` (on the event loop): NotCachedError unless every answer
    is known without blocking (every partition's offsets kept, none with records to read),
    the common case of a long-poll of caught-up partitions, which then costs no thread
    hop."""
    budget = int(min(int(request.max_bytes), ctx.config.fetch_max_bytes, quota_bytes))
    committed = int(request.isolation_level) == READ_COMMITTED
    topics, ids = [], set()  # plain loops: on the loop for every long-poll
    for ref, parts in grouped:
        topics.append(_Topic(ref, parts))
        if isinstance(ref, uuid.UUID):
            ids.add(ref)
    by_id = ctx.topics_by_id(ids, cached_only) if ids else {}
    wanted: list[tuple[str, Partition]] = []
    for t in topics:
        if isinstance(t.ref, uuid.UUID):
            info = by_id.get(t.ref)
            if info is None:
                t.reads = [PartitionRead(int(p.partition), ErrorCode.unknown_topic_id)
                           for p in t.partitions]
                continue
            t.name, t.row = info.name, info.id
        else:
            t.name = t.ref
        if not readable(t.name):
            t.reads = denied(t.partitions)
            continue
        for p in t.partitions:
            wanted.append((t.name, p))
    try:
        found = partitions(ctx, wanted, committed, cached_only)
    except NotCachedError:
        raise
    except Exception as exc:  # the metadata store unreachable: no partition is answered
        code = failed("reading the fetched partitions", exc, FETCH)[0]
        found = {}
        for t in topics:
            if t.reads is None:
                t.reads = [PartitionRead(int(p.partition), code) for p in t.partitions]
    results: list[tuple[TopicRef, str, list[PartitionRead]]] = []
    first = True
    pages = None
    if not cached_only:  # (a pass on the loop reads no segment: no pages to make)
        for listed in found.values():
            if listed.segments:
                pages = _Pages(ctx, committed, topics, found)
                break
    for t in topics:
        if t.reads is None and t.row is not None:
            gone = _gone(ctx, t, found)
            if gone is not None:
                t.reads = [PartitionRead(int(p.partition), gone) for p in t.partitions]
        if t.reads is not None:
            results.append((t.ref, t.name, t.reads))
            continue
        reads = []
        for p in t.partitions:
            index = int(p.partition)
            f = found.get((t.name, index))
            if f is None:
                read = PartitionRead(index, ErrorCode.unknown_topic_or_partition)
            else:
                try:
                    read = read_partition(ctx, t.name, p, f, max(budget, 0), first, committed,
                                          pages)
                except Exception as exc:  # the topic deleted since `found`, a store failure
                    read = PartitionRead(index, failed(f"reading {t.name}/{index}", exc,
                                                       FETCH)[0])
            budget -= read.size
            first = first and not read.size
            reads.append(read)
        results.append((t.ref, t.name, reads))
    if committed:
        add_aborted(ctx, fetch_offsets(grouped), results,
                    {k for k, f in found.items() if f.aborted_after})
    return results


def _gone(ctx: ServerContext, t: _Topic, found: dict[Key, PartitionFrom]) -> ErrorCode | None:
    """UNKNOWN_TOPIC_ID if the topic a request named by id is no longer the one read
    (deleted, or deleted and created again): its partitions' topic row tells, or, none of
    them found, a look at the topic itself (a second statement, only then); None if it
    still is."""
    rows = {f.topic_id for p in t.partitions
            if (f := found.get((t.name, int(p.partition)))) is not None}
    if rows:
        return None if rows == {t.row} else ErrorCode.unknown_topic_id
    try:
        ctx.metadata.partitions(t.name, t.row)
    except UnknownTopicError:
        return ErrorCode.unknown_topic_id
    except Exception as exc:
        return failed(f"listing the partitions of {t.name!r}", exc, FETCH)[0]
    return None  # it lacks those partitions: each answers UNKNOWN_TOPIC_OR_PARTITION


def partitions(ctx: ServerContext, wanted: list[tuple[str, Partition]], committed: bool,
               cached_only: bool = False) -> dict[Key, PartitionFrom]:
    """The offsets of every (topic, partition) in `wanted` and the first segments of those
    with something to read from their fetch offset (below the high watermark, or the last
    stable offset when `committed`), in ONE metadata statement for all topics, or none
    when the partition states cache (agent/protocol/states.py) knows every partition and
    none has anything to read: a long-poll of caught-up partitions reads nothing. A
    partition that does not exist is absent. `cached_only`: NotCachedError rather than a
    read (OffsetsNotKept when only offsets are missing)."""
    generation = ctx.states.generation()  # before reading: see states.py
    kept = ctx.states.kept()
    # Known partitions with nothing to read are answered from their offsets: no segments.
    out: dict[Key, PartitionFrom] = {}
    ask, unknown = [], []
    for topic, p in wanted:  # a plain loop: this runs on the loop for every long-poll
        key, offset = (topic, int(p.partition)), int(p.fetch_offset)
        hit = kept.get(key)
        if hit is None:
            unknown.append(key)
        elif not _has_data(hit[1], offset, committed):
            out[key] = PartitionFrom(hit[0], hit[1], [])
            continue
        ask.append((topic, key[1], offset))
    if not ask:
        return out
    if cached_only:
        raise (OffsetsNotKept(unknown) if len(unknown) == len(ask)
               else NotCachedError("partitions to read"))
    found = ctx.metadata.partitions_from(ask, limit=FIRST_SEGMENTS)
    ctx.states.put(generation, {k: (f.topic_id, f.info) for k, f in found.items()})
    out.update(found)  # one read and not found is gone (its topic deleted since)
    return out


def _has_data(info: PartitionInfo, offset: int, committed: bool) -> bool:
    """Whether a fetch from `offset` has records to read (else it is caught up, or out of
    range: either answered from the offsets alone)."""
    end = info.last_stable_offset if committed else info.next_offset
    return info.log_start_offset <= offset < end


def _wants(results: list[tuple[TopicRef, str, list[PartitionRead]]]) -> list[tuple[Key, Seen]]:
    """What a long-poll's answer rests on: each partition read, by name, and its offsets."""
    return [((name, r.index), Seen(r.row, r.log_start, r.high_watermark, r.last_stable))
            for _, name, reads in results for r in reads]


def denied(partitions: list[Partition]) -> list[PartitionRead]:
    return [PartitionRead(int(p.partition), ErrorCode.topic_authorization_failed)
            for p in partitions]


def add_aborted(ctx: ServerContext, offsets: dict[tuple[TopicRef, int], int],
                results: list[tuple[TopicRef, str, list[PartitionRead]]],
                aborted_after: set[Key]) -> None:
    """A read_committed fetch's aborted transactions: per partition with records, those
    overlapping [fetch offset, end of the last batch sent) (Kafka's collectAbortedTxns:
    marker at or after the fetch offset, first offset before the upper bound), all read
    in one metadata statement, and only if one of them is in `aborted_after` (a marker at
    or after its fetch offset: else it has none); [] for the others. `offsets`: each
    partition's fetch offset (`fetch_offsets`)."""
    ranges = []
    for ref, topic, reads in results:
        for r in reads:
            r.aborted = []
            if r.records and not r.error and (topic, r.index) in aborted_after:
                ranges.append((topic, r.index, offsets[(ref, r.index)],
                               end_offset(r.records[-1])))
    if not ranges:
        return
    try:
        found = ctx.metadata.aborted_transactions(ranges)
    except Exception as exc:  # the metadata store unreachable: no partition is answered
        code = failed("reading the aborted transactions", exc, FETCH)[0]
        for _, _, reads in results:
            for r in reads:
                if r.records:
                    r.error, r.records, r.size = code, [], 0
        return
    for _, topic, reads in results:
        for r in reads:
            r.aborted = found.get((topic, r.index), [])


def _read_counted(ctx: ServerContext, request: Request, grouped: Grouped,
                  readable: Callable[[str], bool], quota_bytes: float
                  ) -> tuple[list[tuple[TopicRef, str, list[PartitionRead]]], int]:
    """`read_all`, and the metadata round trips it made (in the pool thread it runs on)."""
    before = telemetry.round_trips_here()
    results = read_all(ctx, request, grouped, readable, quota_bytes)
    return results, telemetry.round_trips_here() - before


async def _pass(ctx: ServerContext, request: Request, grouped: Grouped,
                readable: Callable[[str], bool], quota_bytes: float
                ) -> tuple[list[tuple[TopicRef, str, list[PartitionRead]]], int]:
    """One `read_all`, and the metadata round trips this fetch paid for: on the event loop
    when nothing blocks (every offset kept, no records to read); when only offsets are
    missing, after a read of them shared with the other long-polls (`PartitionStates.share`;
    a second only if a notification forgot what the first kept); else in the pool."""
    trips = 0
    for _ in range(SHARED_TRIES):
        try:
            return read_all(ctx, request, grouped, readable, quota_bytes, True), trips
        except OffsetsNotKept as exc:
            if not ctx.states.hearing():
                break
            generation = ctx.states.generation()
            shared = await ctx.states.share(exc.keys)
            if shared is None:
                break
            trips += shared
            if ctx.states.generation() == generation:  # what it read is kept, if it exists
                with contextlib.suppress(NotCachedError):
                    return read_all(ctx, request, grouped, readable, quota_bytes, True), trips
                break
        except NotCachedError:
            break
    results, more = await ctx.run(_read_counted, ctx, request, grouped, readable,
                                  quota_bytes)
    return results, trips + more


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Encoded:
    readable = ctx.authz.decider(Operation.READ, ResourceType.TOPIC)
    # As Kafka's getMaxValueInQuotaWindow: never more than the quota lets through before a
    # throttle is certain (else a big enough response would be throttled, unsent, forever).
    quota_bytes = ctx.quota_window_bytes(FETCH_QUOTA, header.client_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    min_bytes = int(request.min_bytes)
    round_trips = 0
    grouped = requested(request)
    while True:
        generation = ctx.states.generation()  # a commit during the pass is not missed
        results, trips = await _pass(ctx, request, grouped, readable, quota_bytes)
        round_trips += trips
        size, errors = 0, False
        for _, _, reads in results:  # plain loops: a generator is a call
            for r in reads:
                size += r.size
                if r.error:  # ErrorCode.none is 0
                    errors = True
        if size >= min_bytes or errors or deadline <= loop.time() or ctx.stopping:
            break
        if ctx.states.generation() != generation:
            continue  # what it read may predate a commit: look again
        # Parked until a refresh sees one of its partitions move, or until the deadline
        # (states.py); expired with nothing moved, the answer read is the answer.
        waiter = ctx.states.park(_wants(results), generation, deadline)
        try:
            moved = await waiter.woken
        finally:
            ctx.states.unpark(waiter)
        if not moved and ctx.states.unchanged(waiter):
            break
    round_trips += ctx.states.paid()  # the shared reads that looked at parked long-polls
    # Client quotas (agent/quotas.py): the records' bytes against consumer_byte_rate; past
    # it, as Kafka, the reply carries no records (not counted), says how long to wait, and
    # the connection is muted that long.
    throttle_ms = ctx.throttle(FETCH_QUOTA, header.client_id, size)
    if throttle_ms > 0:
        ctx.unthrottle(FETCH_QUOTA, header.client_id, size)
        results = []
    if size:
        telemetry.fetched((name, sum(r.size for r in reads)) for _, name, reads in results)
    telemetry.fetch_round_trips(round_trips)
    return response(b, [(ref, reads) for ref, _, reads in results], throttle_ms)


# FetchResponse v4-v17 in wire bytes, written here (the hot path) rather than through kio;
# tests/protocol/test_fetch_response.py checks it equals kio's encoding for every version.
# throttle_time_ms; error_code and session_id (v7+, 0 and 0: no fetch sessions); per topic:
# name (v13+: its id, 16 bytes); per partition: index, error_code, high_watermark,
# last_stable_offset (under both isolation levels, as Kafka), log_start_offset (v5+),
# aborted_transactions (null under read_uncommitted, as Kafka sends, else an array of
# producer_id int64, first_offset int64), preferred_read_replica (v11+, -1: none), records
# (int32 length, or compact: length + 1, then the batches as they are). v12+ is flexible:
# compact arrays and strings and an empty tagged-field section closing each struct (Kafka
# writes no tag whose value is its default: diverging_epoch, current_leader, snapshot_id
# are never set here, nor v16's node_endpoints, sent only with a new leader).
_TOP_V4 = struct.Struct(">i")  # throttle_time_ms
_TOP_V7 = struct.Struct(">ihi")  # ... error_code, session_id
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error_code, high_watermark, last_stable
_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log_start_offset
_INT32 = struct.Struct(">i")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
_NO_TAGS = b"\x00"
_NO_REPLICA = _INT32.pack(-1)
FLEXIBLE_FROM = 12


def _aborted(txns: list[AbortedTxn] | None, flexible: bool, replica: bool) -> bytes:
    """A partition's aborted_transactions (and preferred_read_replica from v11)."""
    if txns is None:
        out = bytearray(b"\x00" if flexible else _INT32.pack(-1))
    else:
        out = bytearray()
        write_array_length(out, len(txns), flexible)
        for a in txns:
            out += _ABORTED.pack(a.producer_id, a.first_offset)
            if flexible:
                out += _NO_TAGS
    if replica:
        out += _NO_REPLICA
    return bytes(out)


_NO_ABORTED = {(flexible, replica): _aborted(None, flexible, replica)
               for flexible in (False, True) for replica in (False, True)}


def response(b: Builder, results: list[tuple[TopicRef, list[PartitionRead]]],
             throttle_ms: int = 0) -> Encoded:
    """The FetchResponse of `b.version` for `results`: its fields in small buffers, its
    records the cached views themselves."""
    version = b.version
    flexible = version >= FLEXIBLE_FROM
    replica = version >= 11
    none = _NO_ABORTED[flexible, replica]  # read_uncommitted: the same for every one
    parts: list[Buffer] = []
    out = bytearray(_TOP_V7.pack(throttle_ms, 0, 0) if version >= 7
                    else _TOP_V4.pack(throttle_ms))
    write_array_length(out, len(results), flexible)
    for topic, reads in results:
        if isinstance(topic, uuid.UUID):
            out += topic.bytes
            write_array_length(out, len(reads), flexible)
        else:
            write_topic_head(out, topic, len(reads), flexible)
        for r in reads:
            code = r.error  # an IntEnum: packed as its int, without a call for `.value`
            out += (_PARTITION_V5.pack(r.index, code, r.high_watermark, r.last_stable,
                                       r.log_start) if version >= 5
                    else _PARTITION_V4.pack(r.index, code, r.high_watermark, r.last_stable))
            out += none if r.aborted is None else _aborted(r.aborted, flexible, replica)
            if flexible:
                write_uvarint(out, r.size + 1)
            else:
                out += _INT32.pack(r.size)
            if r.records:
                parts.append(out)
                parts += r.records
                out = bytearray()
            if flexible:
                out += _NO_TAGS
        if flexible:
            out += _NO_TAGS
    if flexible:
        out += _NO_TAGS
    parts.append(out)
    return b.encoded(*parts)
