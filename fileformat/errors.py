"""Errors about the bytes `fileformat` encodes and decodes (flat: one class per condition).

Misuse of the writing API (bad arguments, calls out of order) raises the built-in
ValueError or RuntimeError instead: that is a bug in the caller, not in the bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class FormatError(Exception):
    """Base class of the errors below: bytes that cannot be read or written as asked."""

    retriable = False


class CorruptDataError(FormatError):
    """Bytes fail a check (CRC, magic, impossible length or offset); never returned as data."""


class TruncatedError(CorruptDataError):
    """A buffer or stream ended before the structure it holds was complete."""


class DecompressionError(CorruptDataError):
    """A compressed records section does not decompress (garbage, truncated, trailing
    bytes) or expands past the bound it was given (a decompression bomb, stopped there)."""


class InvalidBatchError(CorruptDataError):
    """A producer's batch breaks a rule Kafka's LogValidator or DefaultRecordBatch enforces
    with InvalidRecordException (Kafka's INVALID_RECORD): the subclasses say which."""


class OldMagicError(InvalidBatchError):
    """Magic 0 or 1: Produce v3+ carries magic 2 batches only (ProduceRequest)."""


class ControlBatchError(InvalidBatchError):
    """A control batch from a client: only a transaction coordinator writes them."""


class BatchCountError(InvalidBatchError):
    """A Produce v3+ partition without exactly one record batch (ProduceRequest
    .validateRecords: "exactly one record batch per partition")."""


class RecordCountError(InvalidBatchError):
    """recordCount below 1, lastOffsetDelta not recordCount - 1, or records that do not
    fill the batch exactly (missing ones, or bytes after the last)."""


class RecordFramingError(InvalidBatchError):
    """A record's varints or lengths do not frame it (negative, past its end, too long)."""


class OffsetDeltaError(InvalidBatchError):
    """A record's offsetDelta is not its index in the batch."""


class ProducerFieldsError(InvalidBatchError):
    """An idempotent batch (producerId >= 0) with a negative baseSequence or epoch."""


class RecordErrorsError(InvalidBatchError):
    """Some records of a well-formed batch are refused (KIP-467): `record_errors` holds
    (index in the batch, message) per refused record, indexes rising."""

    def __init__(self, message: str, record_errors: tuple[tuple[int, str], ...]) -> None:
        super().__init__(message)
        self.record_errors = record_errors


class NullKeyRecordsError(RecordErrorsError):
    """Records without a key for a compacted topic (Kafka: INVALID_RECORD per record)."""


class LogAppendTimeError(RecordErrorsError):
    """A producer set the LogAppendTime bit (Kafka: INVALID_TIMESTAMP for every record)."""


class UnsupportedCodecError(FormatError):
    """A codec the request's version may not carry: zstd before Produce v7 (Kafka's
    UNSUPPORTED_COMPRESSION_TYPE)."""


class UnsupportedError(FormatError):
    """A well-formed structure uses a version, magic, codec or batch kind (control batches)
    this build cannot handle."""


class NativeBuildError(ImportError):
    """The compiled module fileformat._native is missing or stale (a build step, not data)."""


@contextmanager
def naming(key: str) -> Iterator[None]:
    """Re-raise a FormatError from the block as the same class with the object's key in
    front of its message (the original chained), so that whoever meets it knows which
    object is bad; an error already naming the key passes unchanged."""
    try:
        yield
    except FormatError as exc:
        if key in str(exc):
            raise
        raise type(exc)(f"object {key!r}: {exc}") from exc
