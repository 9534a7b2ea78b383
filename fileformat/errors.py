"""Errors raised by the pure codecs in `fileformat` (flat: one class per condition)."""

from __future__ import annotations


class FormatError(Exception):
    """Base class for every error raised while encoding or decoding siltstream bytes."""

    retriable = False


class CorruptDataError(FormatError):
    """Bytes fail a check (CRC, magic, impossible length or offset); never returned as data."""


class TruncatedError(CorruptDataError):
    """A buffer or stream ended before the structure it holds was complete."""


class UnsupportedError(FormatError):
    """A well-formed structure uses a version, magic or codec this build cannot handle."""
