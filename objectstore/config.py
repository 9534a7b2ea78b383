"""Object-store settings (the `store` section): which store, by URL. Declared once here;
loaded by `settings.load` (env `SILT_STORE`, as always). Which backend serves a URL is
decided here too, so that a bad URL stops start-up with one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlparse

from settings import Section, integer, text

SCHEMES = ("file", "memory", "s3")  # served by siltstream's own backends (s3: boto3)
FSSPEC_PREFIX = "fsspec+"  # `fsspec+P://...`: protocol P through fsspec, native names too
# fsspec's caching layers read whole blocks ahead and keep copies: a store must not be one.
CACHING_PROTOCOLS = ("blockcache", "cached", "filecache", "simplecache")
URL = "url"
RETRY_ATTEMPTS = "retry.attempts"
RETRY_BACKOFF_MS = "retry.backoff.ms"
RETRY_BACKOFF_MAX_MS = "retry.backoff.max.ms"
RETRY_THROTTLE_BACKOFF_MS = "retry.throttle.backoff.ms"
ENV_URL = "SILT_STORE"
URL_FORMS = ("file:///path, memory://name, s3://bucket/prefix, or any fsspec URL "
             "(gcs://bucket/prefix, abfs://..., hdfs://..., fsspec+s3://bucket/prefix)")


def fsspec_protocol(url: str) -> str | None:
    """The fsspec protocol that serves `url`, or None when a native backend does (or
    nothing does): `fsspec+P://…` -> P for any protocol fsspec knows; a plain scheme fsspec
    knows that is not native (gcs, abfs, hdfs, s3a, …) -> itself. Chained URLs (`a::b`) and
    caching layers are refused. fsspec is imported only for a non-native scheme."""
    scheme = urlparse(url).scheme
    if scheme in SCHEMES or not scheme or "::" in url:
        return None
    protocol = scheme.removeprefix(FSSPEC_PREFIX)
    from fsspec.registry import known_implementations, registry

    if protocol in CACHING_PROTOCOLS or (protocol not in known_implementations
                                         and protocol not in registry):
        return None
    return protocol


def is_store_url(url: str) -> bool:
    """Whether some backend serves `url` (its implementation may still need installing)."""
    return urlparse(url).scheme in SCHEMES or fsspec_protocol(url) is not None


@dataclass(frozen=True, slots=True)
class StoreConfig(Section):
    """Where objects live: `file:///path` (or `file://./relative`), `memory://name` (tests),
    `s3://bucket/prefix` (boto3 and the standard AWS variables), or any other fsspec URL
    (its filesystem's options from fsspec's own configuration).

    Every request is retried by the one retry policy (`objectstore.RetryPolicy`): up to
    retry.attempts tries in all, waiting a random share of retry.backoff.ms doubled per
    failed try (at most retry.backoff.max.ms) after a 5xx answer or a dropped connection,
    and between half and all of retry.throttle.backoff.ms doubled per try (at most
    retry.backoff.max.ms, or retry.throttle.backoff.ms if larger) after a throttle (503
    SlowDown, 429)."""

    SECTION: ClassVar[str] = "store"

    url: str = text(URL, "file://./silt-data/objects", allowed=f"a URL {URL_FORMS}",
                    check=is_store_url, env=ENV_URL, doc="where objects live")
    retry_attempts: int = integer(
        RETRY_ATTEMPTS, 6, lo=1, hi=100,
        doc="tries in all of every object-store request (streamed uploads' parts included)")
    retry_backoff_ms: int = integer(
        RETRY_BACKOFF_MS, 50, lo=0,
        doc="wait before a retry after a 5xx or a dropped connection: doubled per try, full"
            " jitter")
    retry_backoff_max_ms: int = integer(
        RETRY_BACKOFF_MAX_MS, 2_000, lo=0,
        doc="the longest wait between two tries (after a throttle: the larger of this and"
            " retry.throttle.backoff.ms)")
    retry_throttle_backoff_ms: int = integer(
        RETRY_THROTTLE_BACKOFF_MS, 250, lo=0,
        doc="wait before a retry after a throttle (503 SlowDown, 429): doubled per try,"
            " half jitter")

    def check_across(self) -> None:
        if self.retry_backoff_max_ms < self.retry_backoff_ms:
            raise self.invalid(RETRY_BACKOFF_MAX_MS, self.retry_backoff_max_ms,
                               f"an integer >= {RETRY_BACKOFF_MS} ({self.retry_backoff_ms})")
