"""Object-store access chosen by URL: `file://`, `memory://`, `s3://bucket/prefix` (boto3),
and any other fsspec URL (`gcs://`, `abfs://`, `hdfs://`, `fsspec+s3://` for s3fs, …).

`open_store(url)` returns a backend wrapped in one retry policy and request counting.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from .base import (
    REQUEST_TYPES,
    ObjectInfo,
    ObjectStore,
    ObjectWriter,
    ReadStream,
    RequestCounts,
)
from .config import (
    FSSPEC_PREFIX,
    SCHEMES,
    URL_FORMS,
    StoreConfig,
    fsspec_protocol,
    is_store_url,
)
from .errors import (
    InvalidRangeError,
    ObjectStoreError,
    RetriableStoreError,
    UnsupportedUrlError,
)
from .local import FileStore, MemoryStore
from .s3 import S3Store
from .wrappers import CountingStore, RetryingStore, RetryPolicy, StoreWrapper

DEFAULT_STORE_URL = StoreConfig().url  # the embedded default
DEFAULT_RETRY = RetryPolicy()


def open_backend(url: str) -> ObjectStore:
    """The bare backend for `url`, without retries or counting."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        # file:///abs/path, or file://./relative (netloc "." or ".."), or file://relative
        path = parsed.netloc + parsed.path if parsed.netloc else parsed.path
        if not path:
            raise UnsupportedUrlError(f"file URL without a path: {url!r}")
        return FileStore(Path(path), url)
    if parsed.scheme == "memory":
        return MemoryStore(parsed.netloc + parsed.path)
    if parsed.scheme == "s3":
        return S3Store(url)
    if fsspec_protocol(url) is not None:
        from .fsspec_store import open_fsspec  # fsspec is imported only when used

        return open_fsspec(url)
    raise UnsupportedUrlError(f"unsupported store URL {url!r}: use {URL_FORMS}")


def open_store(
    url: str, *, counting: bool = True, retry: RetryPolicy | None = DEFAULT_RETRY
) -> ObjectStore:
    """The store for `url`: counting(retrying(backend)); `store.counters()` reads counts.

    `retry=None` leaves retries out; `counting=False` leaves counting out (counters() is
    then all zeros).
    """
    store = open_backend(url)
    if retry is not None:
        store = RetryingStore(store, retry)
    return CountingStore(store) if counting else store


__all__ = [
    "DEFAULT_RETRY",
    "DEFAULT_STORE_URL",
    "FSSPEC_PREFIX",
    "REQUEST_TYPES",
    "SCHEMES",
    "CountingStore",
    "FileStore",
    "InvalidRangeError",
    "MemoryStore",
    "ObjectInfo",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectWriter",
    "ReadStream",
    "RequestCounts",
    "RetriableStoreError",
    "RetryPolicy",
    "RetryingStore",
    "S3Store",
    "StoreConfig",
    "StoreWrapper",
    "UnsupportedUrlError",
    "fsspec_protocol",
    "is_store_url",
    "open_backend",
    "open_store",
]
