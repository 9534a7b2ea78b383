"""Errors of the metadata store: one class per condition, flat, each saying whether a retry
of the same call may succeed (`retriable`)."""

from __future__ import annotations

from settings.errors import SettingError


class MetadataError(Exception):
    """Base class of every metadata-store error."""

    retriable: bool = False


class UnsupportedMetadataUrlError(MetadataError):
    """The metadata URL names a backend this store does not support (or no database file)."""


class SchemaVersionError(MetadataError):
    """The database schema is newer than this code understands."""


class InvalidTopicError(MetadataError):
    """The topic name is not a legal Kafka topic name."""


class InvalidPartitionsError(MetadataError):
    """The partition count is not a positive integer."""


class UnknownTopicError(MetadataError):
    """No topic has this name."""


class TopicExistsError(MetadataError):
    """A topic with this name already exists."""


class InvalidConfigError(MetadataError, SettingError):
    """A topic config key is unknown or its value is not allowed (a bad setting too)."""


class UnknownPartitionError(MetadataError):
    """The topic exists but has no partition with this number."""


class PolicyViolationError(MetadataError):
    """Base of the rules of the cluster that forbid a change (Kafka's POLICY_VIOLATION; never
    raised itself): PartitionLimitError, DeletePolicyError."""


class PartitionLimitError(PolicyViolationError):
    """The partitions of all topics together would exceed max.partitions."""


class DeletePolicyError(PolicyViolationError):
    """DeleteRecords on a topic whose cleanup.policy lacks `delete` (as Kafka refuses it)."""


class OffsetOutOfRangeError(MetadataError):
    """The requested offset is below the partition's log start offset."""


class InvalidCommitError(MetadataError):
    """The chunks handed to a commit are malformed (empty, duplicated, negative spans): a
    bug of the caller."""


class InvalidProducerBatchError(InvalidCommitError):
    """An idempotent producer's batch handed to a commit is malformed (a bad producer id or
    epoch, a sequence out of range, overlapping or leaving its chunk): that chunk is refused
    (Kafka's INVALID_RECORD)."""


class ObjectKeyExistsError(MetadataError):
    """A file row with this object key already exists (keys must be unique)."""


class UnknownFileError(MetadataError):
    """No file row has this id."""


class UnknownJobError(MetadataError):
    """No compaction job row has this id."""


class FileStateError(MetadataError):
    """The file is not in the state the operation needs (e.g. committing a non-pending file)."""


class CommitConflictError(MetadataError):
    """The commit was definitely not applied (what it read changed — an input no longer live,
    an overlapping live segment, an output file collected — or a lock timeout, deadlock or
    lost connection before COMMIT); retrying it is safe."""

    retriable = True


class CommitUnknownError(MetadataError):
    """The commit may or may not have been applied (the connection failed during COMMIT and
    the outcome could not be read back); do not delete the object."""


class JobLeasedError(MetadataError):
    """Another worker holds an unexpired lease on this job; wait for it to end or expire."""

    retriable = False


class JobConflictError(MetadataError):
    """An input file of the job is not live or is held by another running job (a job that
    can never commit is abandoned on takeover)."""


class StaleLeaseError(MetadataError):
    """The lease was taken over (its fence moved) or the job is over: this worker may not
    commit; nothing was applied."""


class UnknownAgentError(MetadataError):
    """No agent is registered under this id (deregistered): register it again."""


class OutOfOrderSequenceError(MetadataError):
    """An idempotent batch's first sequence does not follow the producer's last one on the
    partition (a gap, or a new epoch not starting at 0); Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER."""


class InvalidProducerEpochError(MetadataError):
    """An idempotent batch carries an epoch older than the producer's current one on the
    partition (a fenced, zombie producer); Kafka's INVALID_PRODUCER_EPOCH."""


class BatchRejectedError(MetadataError):
    """Nothing of this chunk was stored because another batch in it was a duplicate or out of
    order; retrying the batch is safe (its sequence numbers were not consumed)."""

    retriable = True


class GroupCoordinatedElsewhereError(MetadataError):
    """Another live agent holds the group's coordinator lease (Kafka's NOT_COORDINATOR: ask
    FindCoordinator again); `holder` is that agent's id."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class GroupLeaseLostError(MetadataError):
    """The group's coordinator lease was taken over (its epoch moved): this agent no longer
    coordinates the group and wrote nothing (Kafka's NOT_COORDINATOR)."""


class GroupNotEmptyError(MetadataError):
    """The group has members: its offsets can be reset or it deleted only while it is empty
    (Kafka's NON_EMPTY_GROUP)."""


class UnknownGroupError(MetadataError):
    """No group by this id has any state or committed offset (Kafka's GROUP_ID_NOT_FOUND)."""


class TransactionCoordinatedElsewhereError(MetadataError):
    """Another live agent holds the transactional id's coordinator lease (Kafka's
    NOT_COORDINATOR: ask FindCoordinator again); `holder` is that agent's id."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class TransactionLeaseLostError(MetadataError):
    """The transactional id's coordinator lease was taken over (its epoch moved): this agent
    no longer coordinates it and wrote nothing (Kafka's NOT_COORDINATOR)."""


class InvalidProducerIdMappingError(MetadataError):
    """No transaction of this transactional id has this producer id (Kafka's
    INVALID_PRODUCER_ID_MAPPING)."""


class ProducerFencedError(MetadataError):
    """A newer producer of the transactional id bumped its epoch: this one is a zombie
    (Kafka's PRODUCER_FENCED; INVALID_PRODUCER_EPOCH to clients of older versions)."""


class InvalidTxnStateError(MetadataError):
    """The transaction is not in a state that allows this (Kafka's INVALID_TXN_STATE: a
    transactional write to a partition or group never added to the transaction, or a
    producer's non-transactional batch while its transaction is open on the partition)."""


class TransactionalIdNotFoundError(MetadataError):
    """No transaction was ever initialised under this transactional id (Kafka's
    TRANSACTIONAL_ID_NOT_FOUND)."""


class ConcurrentTransactionsError(MetadataError):
    """The transactional id's previous transaction is still completing (Kafka's
    CONCURRENT_TRANSACTIONS: the client retries)."""

    retriable = True


class MetadataNotFoundError(MetadataError):
    """No siltstream metadata at this URL (no SQLite file, or a database without the
    schema) and the caller did not ask to create it: `silt init` creates it."""


class MetadataUnavailableError(MetadataError):
    """The metadata database cannot be opened: the server is down or refuses us, the
    database does not exist, or the file is not an SQLite database."""

    retriable = True


class InvalidQuotaError(MetadataError):
    """A client quota alteration or filter Kafka refuses (INVALID_REQUEST): an empty or
    mixed entity, an unknown key, a value not above 0 or fractional for a byte rate."""


class UnsupportedQuotaEntityError(MetadataError):
    """A client quota filter names an entity type Kafka does not know
    (UNSUPPORTED_VERSION)."""


class InvalidBrokerConfigError(MetadataError):
    """A dynamic broker config Kafka's broker refuses to update (ConfigAdminManager answers
    INVALID_REQUEST: not dynamic, not per listener, not at the cluster default, a bad value)."""
