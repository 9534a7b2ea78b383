"""Errors of the compactor."""

from __future__ import annotations


class CompactorError(Exception):
    """Base class of compactor errors."""

    retriable = False


class JobSkippedError(CompactorError):
    """The job could not start: its inputs changed or another worker holds it."""

    retriable = True


class JobFailedError(CompactorError):
    """The job failed before its commit; nothing became visible and outputs were removed."""

    retriable = True


class JobLostError(CompactorError):
    """The commit was refused (a conflicting commit or a newer lease won); nothing changed."""

    retriable = True
