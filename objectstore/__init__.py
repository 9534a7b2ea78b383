"""Object-store access chosen by URL: `file://`, `memory://`, `s3://bucket/prefix` (boto3),
and any other fsspec URL (`gcs://`, `abfs://`, `hdfs://`, `fsspec+s3://` for s3fs, …).

`open_store(url)` returns a backend wrapped in one retry policy and request counting.
`StoreSpec.resolve(url)` is a URL with the client options this process resolved (for S3:
endpoint, region, addressing style), for opening the same store in another process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from .base import (
    MTIME_SLACK_MS,
    REQUEST_TYPES,
    ObjectInfo,
    ObjectStore,
    ObjectWriter,
    ReadStream,
    RequestCounts,
    UnfinishedUpload,
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
    BucketNotFoundError,
    InvalidRangeError,
    ObjectStoreError,
    RetriableStoreError,
    ThrottledError,
    UnsupportedUrlError,
)
from .local import FileStore, MemoryStore
from .s3 import S3Options, S3Store
from .wrappers import CountingStore, RetryingStore, RetryPolicy, StoreWrapper

DEFAULT_STORE_URL = StoreConfig().url  # the embedded default
DEFAULT_RETRY = RetryPolicy.of(StoreConfig())  # the store.retry.* defaults


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """How to open a store anywhere: its URL and the client options resolved where the spec
    was made. Picklable and free of credentials, so a Spark driver resolves it once and its
    executors, whose environment may lack `AWS_ENDPOINT_URL` or a region, open the very same
    store with it. Options left None come from the opening process's environment."""

    url: str
    s3: S3Options | None = None

    @classmethod
    def resolve(cls, url: str) -> StoreSpec:
        """`url` with this process's client options (s3://: from the AWS variables)."""
        return cls(url, S3Options.from_environment() if urlparse(url).scheme == "s3" else None)


def open_backend(store: str | StoreSpec) -> ObjectStore:
    """The bare backend for a URL or spec, without retries or counting."""
    spec = store if isinstance(store, StoreSpec) else StoreSpec(store)
    url = spec.url
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
        return S3Store(url, options=spec.s3)
    if fsspec_protocol(url) is not None:
        from .fsspec_store import open_fsspec  # fsspec is imported only when used

        return open_fsspec(url)
    raise UnsupportedUrlError(f"unsupported store URL {url!r}: use {URL_FORMS}")


def open_store(
    url: str | StoreSpec, *, counting: bool = True, retry: RetryPolicy | None = DEFAULT_RETRY
) -> ObjectStore:
    """The store for `url` (or a StoreSpec): counting(retrying(backend));
    `store.counters()` reads counts.

    `retry`: the policy (`RetryPolicy.of(settings.store)`); `retry=None` leaves retries
    out; `counting=False` leaves counting out (counters() is
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
    "MTIME_SLACK_MS",
    "REQUEST_TYPES",
    "SCHEMES",
    "BucketNotFoundError",
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
    "S3Options",
    "S3Store",
    "StoreConfig",
    "StoreSpec",
    "StoreWrapper",
    "ThrottledError",
    "UnfinishedUpload",
    "UnsupportedUrlError",
    "fsspec_protocol",
    "is_store_url",
    "open_backend",
    "open_store",
]
