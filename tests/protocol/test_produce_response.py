"""The Produce handler writes its responses' bytes itself (the hot path): they must equal what
kio encodes from Kafka's schema, for every version the server advertises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from agent.protocol.apis import PRODUCE, TABLE
from agent.protocol.apis.produce import Appended, Outcome, Refusal, _response
from agent.protocol.codec import Builder, frame

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Results = list[tuple[str, list[tuple[int, Outcome]]]]

CASES: list[Results] = [
    [],
    [("orders", [(0, Appended(0))])],
    [("orders", [(0, Appended(1234)), (1, ErrorCode.corrupt_message), (99, Appended(2**40))]),
     ("é" * 70, [(i, Appended(i * 1000)) for i in range(130)])],  # past one varint byte
    [("stamped", [(0, Appended(7, 1_700_000_000_123)), (1, Appended(0, 0))])],
    [("t", [(3, ErrorCode.unknown_topic_or_partition)]), ("u", [])],
    # KIP-467 record errors (v8+; older versions carry the code alone)
    [("t", [(0, Refusal(ErrorCode.invalid_record, ((0, "no key"), (9, "é" * 200)), "bad")),
            (1, Appended(5)), (2, Refusal(ErrorCode.invalid_timestamp, (), None))])],
    [("t", [(0, Refusal(ErrorCode.invalid_record, tuple((i, "x") for i in range(200)),
                        "m" * 300))])],
]


def _partition(b: Builder, index: int, o: Outcome) -> object:
    if isinstance(o, Refusal):
        return b("PartitionProduceResponse", index=i32(index), error_code=o.code,
                 base_offset=i64(-1), log_append_time=None, log_start_offset=i64(-1),
                 record_errors=tuple(
                     b("BatchIndexAndErrorMessage", batch_index=i32(i),
                       batch_index_error_message=m) for i, m in o.record_errors)
                 if b.version >= 8 else (),
                 error_message=o.message)
    if isinstance(o, ErrorCode):
        return b("PartitionProduceResponse", index=i32(index), error_code=o,
                 base_offset=i64(-1), log_append_time=None, log_start_offset=i64(-1),
                 record_errors=(), error_message=None)
    return b("PartitionProduceResponse", index=i32(index), error_code=ErrorCode.none,
             base_offset=i64(o.base_offset),
             log_append_time=None if o.log_append_time < 0 else
             EPOCH + timedelta(milliseconds=o.log_append_time),
             log_start_offset=i64(-1), record_errors=(), error_message=None)


def _kio_response(b: Builder, results: Results) -> object:
    """The reference: kio's entity for the same response (what the handler used to build)."""
    return b("ProduceResponse", throttle_time=timedelta(0), responses=tuple(
        b("TopicProduceResponse", name=topic, partition_responses=tuple(
            _partition(b, index, o) for index, o in parts))
        for topic, parts in results))


@pytest.mark.parametrize("version", range(TABLE[PRODUCE].min_version,
                                          TABLE[PRODUCE].max_version + 1))
@pytest.mark.parametrize("results", CASES)
def test_produce_response_bytes_equal_kio(version: int, results: Results) -> None:
    b = Builder(PRODUCE, version)
    assert frame(7, _response(b, results)) == frame(7, _kio_response(b, results))
