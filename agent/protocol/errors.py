"""Errors of the protocol server, and THE table from exceptions to Kafka error codes.

Every handler answers a failure through `CODES` (`error_code`, `failed`): one row per
exception class, most specific first, the first row whose class the exception is an instance
of gives the code. A condition a handler must answer differently gets its own class and row
(the authorization errors to come: one row each). What the table does not name — a store
failure or a bug — each API answers its own way, as Kafka does (`Otherwise`: an admin change
that definitely did not apply is REQUEST_TIMED_OUT so that the client retries it, one whose
outcome is unknown UNKNOWN_SERVER_ERROR; a produce whose store failed KAFKA_STORAGE_ERROR).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from kio.schema.errors import ErrorCode

from acl import InvalidAclError
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
from agent.groups.errors import CoordinatorClosingError, CoordinatorNotRegisteredError
from agent.sasl.errors import AuthenticationFailed, UnacceptableCredential, UnsupportedMechanism
from fileformat.errors import (
    FormatError,
    InvalidBatchError,
    LogAppendTimeError,
    UnsupportedCodecError,
    UnsupportedError,
)
from metadata.errors import (
    BatchRejectedError,
    ConcurrentTransactionsError,
    GroupCoordinatedElsewhereError,
    GroupLeaseLostError,
    GroupNotEmptyError,
    InvalidBrokerConfigError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidProducerBatchError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidQuotaError,
    InvalidTopicError,
    InvalidTxnStateError,
    MetadataError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    PolicyViolationError,
    ProducerFencedError,
    TopicExistsError,
    TransactionalIdNotFoundError,
    TransactionCoordinatedElsewhereError,
    TransactionLeaseLostError,
    UnknownGroupError,
    UnknownPartitionError,
    UnknownTopicError,
    UnsupportedQuotaEntityError,
)
from objectstore.errors import ObjectStoreError

log = logging.getLogger(__name__)

E = ErrorCode


class ProtocolError(Exception):
    """A connection sent bytes that are not a request this server accepts (garbage, a
    truncated or oversize frame, an unknown API key or version): that connection is closed.
    `reason`: the label it is counted under (telemetry.REFUSAL_REASONS)."""

    def __init__(self, message: str, reason: str = "malformed_request") -> None:
        super().__init__(message)
        self.reason = reason


CODES: Final[tuple[tuple[type[BaseException], ErrorCode], ...]] = (
    # Topics and partitions (metadata store, agent).
    (UnknownTopicError, E.unknown_topic_or_partition),
    (UnknownPartitionError, E.unknown_topic_or_partition),
    (PartitionOutOfRangeError, E.unknown_topic_or_partition),
    (InvalidTopicError, E.invalid_topic_exception),
    (TopicExistsError, E.topic_already_exists),
    (InvalidPartitionsError, E.invalid_partitions),
    (InvalidConfigError, E.invalid_config),
    (InvalidBrokerConfigError, E.invalid_request),  # as Kafka's ConfigAdminManager
    (PolicyViolationError, E.policy_violation),  # max.partitions, DeleteRecords' policy
    (OffsetOutOfRangeError, E.offset_out_of_range),
    # Produce: the records (Kafka's LogValidator and ProduceRequest.validateRecords).
    (RecordTooLargeError, E.message_too_large),
    (NullKeyError, E.invalid_record),
    (TransactionalBatchError, E.transactional_id_authorization_failed),
    (LogAppendTimeError, E.invalid_timestamp),
    (InvalidBatchError, E.invalid_record),  # Kafka's InvalidRecordException
    (UnsupportedCodecError, E.unsupported_compression_type),
    (UnsupportedError, E.unsupported_for_message_format),
    (FormatError, E.corrupt_message),  # bad CRC, framing, magic, undecodable compression
    # Produce: buffering, flushing, the producer state checked at commit.
    (BufferFullError, E.request_timed_out),
    (FlushOutcomeUnknownError, E.request_timed_out),
    (FlushError, E.kafka_storage_error),
    (OutOfOrderSequenceError, E.out_of_order_sequence_number),
    (InvalidProducerEpochError, E.invalid_producer_epoch),
    (InvalidProducerBatchError, E.invalid_record),
    # Nothing of the batch was stored (another batch of its chunk was refused at commit): a
    # code librdkafka and kafka-python retry with the same sequences.
    (BatchRejectedError, E.not_enough_replicas),
    (AgentClosedError, E.not_leader_or_follower),
    # Groups.
    (GroupLeaseLostError, E.not_coordinator),
    (GroupCoordinatedElsewhereError, E.not_coordinator),
    (CoordinatorClosingError, E.not_coordinator),  # shutting down: ask FindCoordinator again
    (CoordinatorNotRegisteredError, E.coordinator_not_available),
    (GroupNotEmptyError, E.non_empty_group),
    (UnknownGroupError, E.group_id_not_found),
    # Transactions (the coordinator's lease, TxnOffsetCommit's checks).
    (TransactionLeaseLostError, E.not_coordinator),
    (TransactionCoordinatedElsewhereError, E.not_coordinator),
    (InvalidProducerIdMappingError, E.invalid_producer_id_mapping),
    (ProducerFencedError, E.producer_fenced),
    (InvalidTxnStateError, E.invalid_txn_state),
    (ConcurrentTransactionsError, E.concurrent_transactions),
    (TransactionalIdNotFoundError, E.transactional_id_not_found),
    # ACLs.
    (InvalidAclError, E.invalid_request),
    (InvalidQuotaError, E.invalid_request),
    (UnsupportedQuotaEntityError, E.unsupported_version),
    # SASL (agent/sasl/): a failed login, a SCRAM credential Kafka would refuse, a mechanism
    # not served.
    (AuthenticationFailed, E.sasl_authentication_failed),
    (UnacceptableCredential, E.unacceptable_credential),
    (UnsupportedMechanism, E.unsupported_sasl_mechanism),
)
"""(exception class, Kafka error code), most specific first: an exception gets the code of
the first row whose class it is an instance of."""


_NAMED: dict[type[BaseException], ErrorCode | None] = {}


def named(cls: type[BaseException]) -> ErrorCode | None:
    """The code `CODES` gives exceptions of class `cls`, None if no row names it (found
    once per class)."""
    try:
        return _NAMED[cls]
    except KeyError:
        code = _NAMED[cls] = next((code for row, code in CODES if issubclass(cls, row)), None)
        return code


# Failures of the stores (anything else may be a bug: logged with its traceback): the
# metadata store's, its database driver's, the object store's, the filesystem's.
STORE_FAILURES = (MetadataError, sa.exc.SQLAlchemyError, ObjectStoreError, OSError)


@dataclass(frozen=True, slots=True)
class Otherwise:
    """How one API answers a failure that `CODES` does not name: a metadata-store error
    that definitely did not apply (`MetadataError.retriable`: a retry may succeed), another
    metadata-store error (its outcome unknown, the store down), the object store's or the
    filesystem's failure, anything else (a bug, a database driver's error the metadata
    store let through)."""

    retriable: ErrorCode
    metadata: ErrorCode
    store: ErrorCode
    other: ErrorCode = E.unknown_server_error

    def code(self, exc: BaseException) -> ErrorCode:
        if isinstance(exc, MetadataError):
            return self.retriable if exc.retriable else self.metadata
        return self.store if isinstance(exc, ObjectStoreError | OSError) else self.other

    @classmethod
    def always(cls, code: ErrorCode) -> Otherwise:
        return cls(code, code, code, code)


# An admin change on one resource (CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
# IncrementalAlterConfigs): REQUEST_TIMED_OUT when it definitely did not apply
# (CommitConflictError: the admin client retries it), else UNKNOWN_SERVER_ERROR (a commit
# whose outcome is unknown, the database unreachable, a bug).
ADMIN: Final = Otherwise(E.request_timed_out, E.unknown_server_error, E.unknown_server_error)
# Produce: the metadata store failed (the object is not committed): KAFKA_STORAGE_ERROR,
# which clients retry.
PRODUCE: Final = Otherwise(E.kafka_storage_error, E.kafka_storage_error,
                           E.unknown_server_error)
# Fetch: the object store or the filesystem failed (a missing object, access denied).
FETCH: Final = Otherwise(E.unknown_server_error, E.unknown_server_error,
                         E.kafka_storage_error)
# Metadata: the store failed looking a topic up (it may well exist): the client asks again.
LOOKUP: Final = Otherwise.always(E.leader_not_available)
# InitProducerId: the producer id could not be allocated.
COORDINATOR: Final = Otherwise.always(E.coordinator_not_available)


def fenced_as(error: ErrorCode, version: int, since: int) -> ErrorCode:
    """PRODUCER_FENCED as a request of `version` may be answered: INVALID_PRODUCER_EPOCH
    before `since`, the first version whose clients know PRODUCER_FENCED (KafkaApis)."""
    return E.invalid_producer_epoch if error is E.producer_fenced and version < since \
        else error


def error_code(exc: BaseException, otherwise: Otherwise = ADMIN) -> ErrorCode:
    """The Kafka error `exc` is answered with: `CODES`' row for it, else `otherwise`'s."""
    code = named(type(exc))
    return otherwise.code(exc) if code is None else code


def log_failure(what: str, exc: BaseException) -> None:
    """Log a failure that a handler answers with an error code."""
    if isinstance(exc, STORE_FAILURES):
        log.warning("%s failed: %s: %s", what, type(exc).__name__, exc)
    else:
        log.warning("%s failed", what, exc_info=exc)


def failed(what: str, exc: BaseException, otherwise: Otherwise = ADMIN
           ) -> tuple[ErrorCode, str]:
    """(error code, message) of `what`, which failed with `exc` (`error_code`); a failure
    the table does not name is logged (`what` failed)."""
    code = named(type(exc))
    if code is None:
        log_failure(what, exc)
        return otherwise.code(exc), str(exc) or type(exc).__name__
    return code, str(exc)
