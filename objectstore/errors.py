"""Object-store errors. Missing objects raise the built-in FileNotFoundError, denied access
PermissionError, failed preconditions FileExistsError; everything else is one of these."""

from __future__ import annotations


class ObjectStoreError(Exception):
    """Base class of object-store errors that have no built-in equivalent."""

    retriable = False


class RetriableStoreError(ObjectStoreError):
    """Throttling, a 5xx answer or a dropped connection: the request may succeed if retried."""

    retriable = True


class ThrottledError(RetriableStoreError):
    """The store asked us to slow down (S3's 503 SlowDown, HTTP 429): retried after the
    longer throttle backoff (`store.retry.throttle.backoff.ms`)."""

    throttled = True


class InvalidRangeError(ObjectStoreError, ValueError):
    """The requested byte range is not satisfiable for this object."""


class UnsupportedUrlError(ObjectStoreError, ValueError):
    """The store URL has a scheme or form this build does not support."""


class BucketNotFoundError(ObjectStoreError, FileNotFoundError):
    """The store's bucket (container) does not exist: every key in it is missing."""
