"""Errors about the bytes `fileformat` encodes and decodes (flat: one class per condition).

Misuse of the writing API (bad arguments, calls out of order) raises the built-in
ValueError or RuntimeError instead: that is a bug in the caller, not in the bytes.
"""

from __future__ import annotations


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
