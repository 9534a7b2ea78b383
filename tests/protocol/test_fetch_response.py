"""The Fetch handler writes its responses' bytes itself (the hot path, records sent as views
of the segment cache): joined, they must equal what kio encodes from Kafka's schema, for every
version the server advertises."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from agent.protocol.apis import FETCH, TABLE
from agent.protocol.apis.fetch import PartitionRead, TopicRef, response
from agent.protocol.codec import Builder, encode_response, frame
from metadata import AbortedTxn

Results = list[tuple[TopicRef, list[PartitionRead]]]
TOPIC_IDS_FROM = 13  # v13+ name topics by id (KIP-516)


def _records(*chunks: bytes) -> list[memoryview]:
    return [memoryview(c) for c in chunks]


def _read(index: int, *chunks: bytes, error: ErrorCode = ErrorCode.none, hw: int = 10,
          log_start: int = 0, lso: int | None = None) -> PartitionRead:
    return PartitionRead(index, error, hw, hw if lso is None else lso, log_start,
                         _records(*chunks), sum(len(c) for c in chunks))


def _isolated(results: Results, aborted_null: bool) -> Results:
    """The results of a read_uncommitted fetch (aborted_transactions null) or of a
    read_committed one (each partition's aborted transactions: none, one, several)."""
    for _, reads in results:
        for r in reads:
            r.aborted = None if aborted_null else [
                AbortedTxn(1000 + i, r.index * 10 + i, 2**40 + i) for i in range(r.index % 3)]
    return results


def _by_id(results: Results) -> Results:
    """The same results with each topic named by an id, as v13+ answers."""
    return [(uuid.uuid5(uuid.NAMESPACE_URL, str(t)), reads) for t, reads in results]


def _cases() -> list[Results]:
    return [
        [],
        [("orders", [_read(0, b"batch")])],
        [("orders", [_read(0, b"a" * 100, b"b" * 300, hw=2**40, log_start=7, lso=2**39),
                     _read(1, error=ErrorCode.offset_out_of_range, hw=5, log_start=3),
                     _read(2)]),  # no records, no error
         ("é" * 70, [_read(i, bytes([i]) * i) for i in range(130)])],  # varints past a byte
        [("t", [_read(3, error=ErrorCode.unknown_topic_or_partition, hw=-1, log_start=-1)]),
         ("u", [])],
    ]


def _kio_response(b: Builder, results: Results) -> object:
    """The reference: kio's entity for the same response (what the handler used to build)."""
    return b("FetchResponse", throttle_time=timedelta(0), error_code=ErrorCode.none,
             session_id=i32(0), responses=tuple(
                 b("FetchableTopicResponse",
                   topic=topic if isinstance(topic, str) else "",
                   topic_id=topic if isinstance(topic, uuid.UUID) else uuid.UUID(int=0),
                   partitions=tuple(
                     b("PartitionData", partition_index=i32(r.index), error_code=r.error,
                       high_watermark=i64(r.high_watermark),
                       last_stable_offset=i64(r.last_stable),
                       log_start_offset=i64(r.log_start),
                       aborted_transactions=None if r.aborted is None else tuple(
                           b("AbortedTransaction", producer_id=i64(a.producer_id),
                             first_offset=i64(a.first_offset)) for a in r.aborted),
                       preferred_read_replica=i32(-1),
                       records=b"".join(r.records))
                     for r in reads))
                 for topic, reads in results))


@pytest.mark.parametrize("version", range(TABLE[FETCH].min_version,
                                          TABLE[FETCH].max_version + 1))
@pytest.mark.parametrize("case", range(len(_cases())))
@pytest.mark.parametrize("aborted_null", [True, False])
def test_fetch_response_bytes_equal_kio(version: int, case: int, aborted_null: bool) -> None:
    b = Builder(FETCH, version)
    results = _isolated(_cases()[case], aborted_null)
    if version >= TOPIC_IDS_FROM:
        results = _by_id(results)
    assert frame(9, response(b, results)) == frame(9, _kio_response(b, results))


def test_records_are_sent_as_the_cached_views() -> None:
    """The record bytes are not copied into the response: its buffers are the views."""
    cached = bytearray(b"x" * 1000)
    view = memoryview(cached)[100:900]
    read = PartitionRead(0, high_watermark=1, last_stable=1, log_start=0, records=[view],
                         size=len(view))
    parts = encode_response(1, response(Builder(FETCH, 12), [("t", [read])]))
    assert any(p is view for p in parts)
