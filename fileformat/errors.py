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
