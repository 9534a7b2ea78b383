"""Errors raised by injected faults."""

from __future__ import annotations


class InjectedCrash(BaseException):
    """An injected crash: a BaseException, so it escapes the product's error handling
    (e.g. `Compactor.run_job`) like a dying process would, and nothing is cleaned up."""
