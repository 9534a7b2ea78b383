"""Errors raised by the agent (produce) and reader (consume) paths."""

from __future__ import annotations


class AgentError(Exception):
    """Base class of agent errors."""

    retriable = False


class NotCachedError(AgentError):
    """Work asked to use only what the agent has cached (`cached_only`: on the server's event
    loop, where nothing may block) would have to read the metadata store first: an append
    (a topic not cached, a partition past the cached count, an idempotent producer's state
    not known here: nothing was buffered), a fetch (a partition whose offsets are not kept
    or that has records to read, a topic id not known). The caller retries where blocking
    is allowed. Never reaches a client."""


class AgentClosedError(AgentError):
    """The agent was closed; no more records are accepted."""


class BufferFullError(AgentError):
    """buffer.memory stayed full for as long as the caller would wait (max.block.ms unless
    it said otherwise); nothing of the call was accepted."""

    retriable = True


class InvalidRecordError(AgentError):
    """Base of the record rules a topic enforces (never raised itself): a null key on a
    compacted topic (NullKeyError), a record or batch too large (RecordTooLargeError)."""


class NullKeyError(InvalidRecordError):
    """A record without a key sent to a compacted topic (Kafka: INVALID_RECORD). A batch's
    null keys are fileformat.errors.NullKeyRecordsError instead (with their indexes)."""


class PartitionOutOfRangeError(AgentError):
    """The partition is past the topic's count, even after reloading the topic once
    (partitions added through another agent): Kafka's UNKNOWN_TOPIC_OR_PARTITION."""


class TransactionalBatchError(AgentError):
    """A transactional batch: transactions are not served (the Produce handler answers as
    KafkaApis does without a transactional id)."""


class RecordTooLargeError(InvalidRecordError):
    """The record (or batch) is larger than the topic's max.message.bytes, or the record
    alone is larger than the agent's whole buffer.memory."""


class FlushError(AgentError):
    """The object holding this record could not be written or committed; none of that
    object's records became visible (with one object per partition, other partitions of
    the same flush may have succeeded)."""

    retriable = True


class FlushOutcomeUnknownError(AgentError):
    """The metadata commit's outcome is unknown: the records may or may not be visible."""
