"""The one table from exceptions to Kafka error codes (`agent.protocol.errors.CODES`), and
how each API answers what it does not name."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from kio.schema.errors import ErrorCode as E

from agent.errors import (
    AgentClosedError,
    BufferFullError,
    FlushError,
    FlushOutcomeUnknownError,
    NullKeyError,
    PartitionOutOfRangeError,
    RecordTooLargeError,
    TransactionalBatchError,
)
from agent.groups.errors import UNSERVED, CoordinatorClosingError, CoordinatorNotRegisteredError
from agent.protocol.errors import (
    ADMIN,
    CODES,
    COORDINATOR,
    FETCH,
    LOOKUP,
    PRODUCE,
    error_code,
    failed,
)
from fileformat.errors import (
    BatchCountError,
    ControlBatchError,
    CorruptDataError,
    DecompressionError,
    LogAppendTimeError,
    NullKeyRecordsError,
    UnsupportedCodecError,
    UnsupportedError,
)
from metadata.errors import (
    BatchRejectedError,
    CommitConflictError,
    CommitUnknownError,
    DeletePolicyError,
    GroupCoordinatedElsewhereError,
    GroupLeaseLostError,
    GroupNotEmptyError,
    InvalidCommitError,
    InvalidProducerBatchError,
    InvalidProducerEpochError,
    InvalidTopicError,
    MetadataUnavailableError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PartitionLimitError,
    UnknownGroupError,
    UnknownPartitionError,
    UnknownTopicError,
)
from objectstore.errors import ObjectStoreError


def test_no_row_is_shadowed_by_an_earlier_one() -> None:
    """Most specific first: a row after one of its base classes would never be reached."""
    for i, (cls, _) in enumerate(CODES):
        for earlier, _ in CODES[:i]:
            assert not issubclass(cls, earlier), f"{cls.__name__} after {earlier.__name__}"
    assert len({cls for cls, _ in CODES}) == len(CODES)


@pytest.mark.parametrize(("exc", "code"), [
    (UnknownTopicError("t"), E.unknown_topic_or_partition),
    (UnknownPartitionError("t/9"), E.unknown_topic_or_partition),
    (PartitionOutOfRangeError("t/9"), E.unknown_topic_or_partition),
    (RecordTooLargeError("big"), E.message_too_large),
    (NullKeyError("no key"), E.invalid_record),
    (TransactionalBatchError("txn"), E.transactional_id_authorization_failed),
    (LogAppendTimeError("lat", ((0, "x"),)), E.invalid_timestamp),
    (NullKeyRecordsError("keys", ((0, "x"),)), E.invalid_record),
    (ControlBatchError("control"), E.invalid_record),
    (BatchCountError("two"), E.invalid_record),
    (UnsupportedCodecError("zstd"), E.unsupported_compression_type),
    (UnsupportedError("codec 7"), E.unsupported_for_message_format),
    (CorruptDataError("crc"), E.corrupt_message),
    (DecompressionError("bomb"), E.corrupt_message),
    (BufferFullError("full"), E.request_timed_out),
    (FlushOutcomeUnknownError("?"), E.request_timed_out),
    (FlushError("put"), E.kafka_storage_error),
    (OutOfOrderSequenceError("gap"), E.out_of_order_sequence_number),
    (InvalidProducerEpochError("old"), E.invalid_producer_epoch),
    (InvalidProducerBatchError("seq"), E.invalid_record),
    (BatchRejectedError("other"), E.not_enough_replicas),
    (AgentClosedError("closed"), E.not_leader_or_follower),
    (CommitConflictError("retry"), E.kafka_storage_error),  # the store's: PRODUCE's answer
    (CommitUnknownError("?"), E.kafka_storage_error),
    (InvalidCommitError("bug"), E.kafka_storage_error),
    (RuntimeError("bug"), E.unknown_server_error),
])
def test_produce(exc: Exception, code: E) -> None:
    assert error_code(exc, PRODUCE) is code


def test_policy_violations_share_a_code() -> None:
    assert error_code(PartitionLimitError("max.partitions")) is E.policy_violation
    assert error_code(DeletePolicyError("compact")) is E.policy_violation


def test_what_the_table_does_not_name_each_api_answers_its_way() -> None:
    conflict, unknown = CommitConflictError("retry"), CommitUnknownError("?")
    down = MetadataUnavailableError("down")  # retriable
    driver = sa.exc.OperationalError("SELECT 1", None, ConnectionRefusedError())
    store, bug = ObjectStoreError("get"), RuntimeError("bug")
    assert [error_code(e, ADMIN) for e in (conflict, down, unknown, driver, store, bug)] == [
        E.request_timed_out, E.request_timed_out, *[E.unknown_server_error] * 4]
    assert [error_code(e, FETCH) for e in (conflict, unknown, store, OSError(), bug)] == [
        E.unknown_server_error, E.unknown_server_error, E.kafka_storage_error,
        E.kafka_storage_error, E.unknown_server_error]
    assert {error_code(e, LOOKUP) for e in (conflict, unknown, store, bug)} == {
        E.leader_not_available}
    assert {error_code(e, COORDINATOR) for e in (conflict, store, bug)} == {
        E.coordinator_not_available}
    # What the table names is answered the same by every API.
    assert {error_code(OffsetOutOfRangeError("below"), o)
            for o in (ADMIN, FETCH, LOOKUP, PRODUCE)} == {E.offset_out_of_range}
    assert error_code(InvalidTopicError("a b"), LOOKUP) is E.invalid_topic_exception


def test_failed_gives_a_message_and_logs_only_the_unnamed(
        caplog: pytest.LogCaptureFixture) -> None:
    assert failed("deleting topic 't'", UnknownTopicError("no topic 't'")) == (
        E.unknown_topic_or_partition, "no topic 't'")
    assert not caplog.records
    assert failed("deleting topic 't'", CommitConflictError()) == (
        E.request_timed_out, "CommitConflictError")
    assert "deleting topic 't' failed" in caplog.text


@pytest.mark.parametrize(("exc", "code"), [
    (GroupLeaseLostError("moved"), E.not_coordinator),
    (GroupCoordinatedElsewhereError("elsewhere", "b"), E.not_coordinator),
    (CoordinatorClosingError("closing"), E.not_coordinator),
    (CoordinatorNotRegisteredError("not yet"), E.coordinator_not_available),
    (GroupNotEmptyError("members"), E.non_empty_group),
    (UnknownGroupError("g"), E.group_id_not_found),
])
def test_groups(exc: Exception, code: E) -> None:
    assert error_code(exc) is code


def test_every_condition_keeping_a_group_request_from_being_served_has_a_row() -> None:
    named = {cls for cls, _ in CODES}
    assert set(UNSERVED) <= named
