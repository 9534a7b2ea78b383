"""Produce (the `Agent`: one object per flush) and consume (`Reader`) paths."""

from .config import AgentConfig
from .errors import (
    AgentClosedError,
    AgentError,
    BufferFullError,
    FlushError,
    FlushOutcomeUnknownError,
    InvalidRecordError,
    NullKeyError,
    PartitionOutOfRangeError,
    RecordTooLargeError,
    TransactionalBatchError,
)
from .producer import Agent, FlushReport, FlushTotals, ProduceFuture
from .reader import ConsumedRecord, Reader
from .runtime import tune_gc

__all__ = [
    "Agent",
    "AgentClosedError",
    "AgentConfig",
    "AgentError",
    "BufferFullError",
    "ConsumedRecord",
    "FlushError",
    "FlushOutcomeUnknownError",
    "FlushReport",
    "FlushTotals",
    "InvalidRecordError",
    "NullKeyError",
    "PartitionOutOfRangeError",
    "ProduceFuture",
    "Reader",
    "RecordTooLargeError",
    "TransactionalBatchError",
    "tune_gc",
]
