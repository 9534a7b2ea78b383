"""Errors of the compactor.

A job's own failures (lost lease, refused commit, store errors) are reported in its
JobReport's `outcome` rather than raised, so one bad job never stops a worker loop.
"""

from __future__ import annotations


class CompactorError(Exception):
    """Base class of compactor errors."""

    retriable = False
