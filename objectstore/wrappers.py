"""Retry and request counting, as wrappers around any ObjectStore (not flags inside it)."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .base import (
    FailureListener,
    ObjectInfo,
    ObjectStore,
    ObjectWriter,
    ReadStream,
    RequestCounts,
    RequestListener,
    RequestRunner,
    UnfinishedUpload,
)
from .config import StoreConfig
from .errors import ObjectStoreError

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The one retry policy: exponential backoff with jitter on retriable errors, longer
    after throttling (errors with a true `throttled` attribute: S3's 503 SlowDown, 429).

    `attempts` counts the first try; `jitter` is the random fraction of each delay
    (1.0 = full jitter, uniform in [0, d]; 0.0 = exactly d). A throttled try waits between
    half and all of its delay (with full jitter), so that it always backs off. Built from
    the `store` settings by `RetryPolicy.of`.
    """

    attempts: int = 6
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    jitter: float = 1.0
    throttle_delay_s: float = 0.25

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, not {self.attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], not {self.jitter}")
        if min(self.base_delay_s, self.max_delay_s, self.throttle_delay_s) < 0:
            raise ValueError("retry delays must not be negative")

    @classmethod
    def of(cls, config: StoreConfig) -> RetryPolicy:
        """The policy the `store.retry.*` settings describe."""
        return cls(attempts=config.retry_attempts, base_delay_s=config.retry_backoff_ms / 1000,
                   max_delay_s=config.retry_backoff_max_ms / 1000,
                   throttle_delay_s=config.retry_throttle_backoff_ms / 1000)

    def delay(self, attempt: int, throttled: bool = False) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if throttled:
            cap = max(self.max_delay_s, self.throttle_delay_s)
            d = min(cap, self.throttle_delay_s * 2.0 ** (attempt - 1))
            return d * (1.0 - self.jitter * random.random() / 2)
        d = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return d * (1.0 - self.jitter * random.random())

    def run(self, fn: Callable[[], T], sleep: Callable[[float], None] = time.sleep,
            on_retry: Callable[[Exception, int], None] | None = None) -> T:
        """Call fn, retrying errors whose `retriable` attribute is true; `on_retry(error,
        attempt)` is told of each failed attempt that is retried. When the attempts run
        out, an ObjectStoreError is raised again as its own class, its message saying so."""
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as exc:
                if not getattr(exc, "retriable", False):
                    raise
                if attempt >= self.attempts:
                    if isinstance(exc, ObjectStoreError):
                        tries = f"{attempt} attempt{'s' if attempt > 1 else ''}"
                        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                        raise type(exc)(f"{first} (gave up after {tries})") from exc
                    raise
                if on_retry is not None:
                    on_retry(exc, attempt)
                sleep(self.delay(attempt, getattr(exc, "throttled", False)))
                attempt += 1


class StoreWrapper(ObjectStore):
    """Forwards every call to `inner`: a wrapper overrides only what it adds."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url

    def set_request_listener(self, listener: RequestListener) -> None:
        self.inner.set_request_listener(listener)

    def set_failure_listener(self, listener: FailureListener) -> None:
        self.inner.set_failure_listener(listener)

    def set_request_runner(self, runner: RequestRunner) -> None:
        self.inner.set_request_runner(runner)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)

    def put_stream(self, key: str) -> ObjectWriter:
        return self.inner.put_stream(key)

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        return self.inner.open_stream(key, start, end)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.inner.get_range(key, start, end)

    def get_range_writable(self, key: str, start: int, end: int) -> bytearray:
        return self.inner.get_range_writable(key, start, end)

    def size(self, key: str) -> int:
        return self.inner.size(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        self.inner.delete_many(keys)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def unfinished_uploads(self, started_before_ms: int) -> Sequence[UnfinishedUpload]:
        return self.inner.unfinished_uploads(started_before_ms)

    def abort_upload(self, upload: UnfinishedUpload) -> None:
        self.inner.abort_upload(upload)


class RetryingStore(StoreWrapper):
    """Retries each request under one RetryPolicy.

    `open_stream` retries only the opening: a stream that breaks mid-read raises
    RetriableStoreError to the caller (resuming would be a second GET it did not ask for).
    `put_stream` hands the policy to the backend (`set_request_runner`), whose writer runs
    each of its requests under it: the PUT, each multipart part, the completion, the abort
    (a writer that gives up aborts its upload). `list` materialises the listing so that it
    can be retried whole. Every request is safe to repeat: a PUT or a part rewrites the
    same bytes, a delete of a missing key succeeds, and a completion whose answer was lost
    is recognised by the object it made (see objectstore/s3.py).
    """

    def __init__(self, inner: ObjectStore, policy: RetryPolicy | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(inner)
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._lock = threading.Lock()
        self.retries = 0  # failed attempts retried, throttled ones included
        self.throttled = 0  # of which throttled
        inner.set_request_runner(self._run)

    def _on_retry(self, exc: Exception, attempt: int) -> None:
        with self._lock:
            self.retries += 1
            self.throttled += bool(getattr(exc, "throttled", False))
        log.debug("retrying after attempt %d: %s", attempt, exc)

    def _run(self, fn: Callable[[], T]) -> T:
        return self.policy.run(fn, self._sleep, self._on_retry)

    def put(self, key: str, data: bytes) -> None:
        self._run(lambda: self.inner.put(key, data))

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        return self._run(lambda: self.inner.open_stream(key, start, end))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._run(lambda: self.inner.get_range(key, start, end))

    def get_range_writable(self, key: str, start: int, end: int) -> bytearray:
        return self._run(lambda: self.inner.get_range_writable(key, start, end))

    def size(self, key: str) -> int:
        return self._run(lambda: self.inner.size(key))

    def delete_many(self, keys: Iterable[str]) -> None:
        batch = list(keys)
        self._run(lambda: self.inner.delete_many(batch))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return iter(self._run(lambda: list(self.inner.list(prefix))))

    def unfinished_uploads(self, started_before_ms: int) -> Sequence[UnfinishedUpload]:
        return self._run(lambda: self.inner.unfinished_uploads(started_before_ms))

    def abort_upload(self, upload: UnfinishedUpload) -> None:
        self._run(lambda: self.inner.abort_upload(upload))


class CountingStore(StoreWrapper):
    """Counts the requests the wrapped backend actually makes, by type, and bytes moved."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._extra: RequestListener | None = None
        inner.set_request_listener(self._on_request)

    def _on_request(self, op: str, sent: int, received: int) -> None:
        with self._lock:
            if op:
                self._counts[op] += 1
            self._counts["bytes_sent"] += sent
            self._counts["bytes_received"] += received
        if self._extra is not None:
            self._extra(op, sent, received)

    def set_request_listener(self, listener: RequestListener) -> None:
        """Also report every request to `listener` (one at a time: metrics, a test)."""
        self._extra = listener

    def counters(self) -> RequestCounts:
        with self._lock:
            return RequestCounts.of(self._counts)
