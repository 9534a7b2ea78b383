"""Errors raised by the agent (produce) and reader (consume) paths."""

from __future__ import annotations


class AgentError(Exception):
    """Base class of agent errors."""

    retriable = False


class AgentClosedError(AgentError):
    """The agent was closed; no more records are accepted."""


class BufferFullError(AgentError):
    """buffer.memory stayed full for as long as the caller would wait (max.block.ms unless
    it said otherwise); nothing of the call was accepted."""

    retriable = True


class InvalidRecordError(AgentError):
    """The record breaks a topic rule (null key on a compacted topic, bad partition...)."""


class NullKeyError(InvalidRecordError):
    """A record without a key sent to a compacted topic (Kafka: INVALID_RECORD)."""


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
