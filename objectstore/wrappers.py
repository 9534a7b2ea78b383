"""Retry and request counting, as wrappers around any ObjectStore (not flags inside it)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
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
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The one retry policy: exponential backoff with jitter on retriable errors.

    `attempts` counts the first try; `jitter` is the random fraction of each delay
    (1.0 = full jitter, uniform in [0, d]; 0.0 = exactly d).
    """

    attempts: int = 5
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, not {self.attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], not {self.jitter}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("retry delays must not be negative")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        d = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return d * (1.0 - self.jitter * random.random())

    def run(self, fn: Callable[[], T], sleep: Callable[[float], None] = time.sleep) -> T:
        """Call fn, retrying errors whose `retriable` attribute is true."""
        attempt = 1
        while True:
            try:
                return fn()
            except Exception as exc:
                if not getattr(exc, "retriable", False) or attempt >= self.attempts:
                    raise
                sleep(self.delay(attempt))
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

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)

    def put_stream(self, key: str) -> ObjectWriter:
        return self.inner.put_stream(key)

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        return self.inner.open_stream(key, start, end)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self.inner.get_range(key, start, end)

    def size(self, key: str) -> int:
        return self.inner.size(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        self.inner.delete_many(keys)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)


class RetryingStore(StoreWrapper):
    """Retries each call under one RetryPolicy.

    `open_stream` retries only the opening: a stream that breaks mid-read raises
    RetriableStoreError to the caller (resuming would be a second GET it did not ask for).
    `put_stream` is not retried at all: a failed part aborts the upload and the caller
    rewrites the object. `list` materialises the listing so that it can be retried whole.
    """

    def __init__(self, inner: ObjectStore, policy: RetryPolicy | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(inner)
        self.policy = policy or RetryPolicy()
        self._sleep = sleep

    def _run(self, fn: Callable[[], T]) -> T:
        return self.policy.run(fn, self._sleep)

    def put(self, key: str, data: bytes) -> None:
        self._run(lambda: self.inner.put(key, data))

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        return self._run(lambda: self.inner.open_stream(key, start, end))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._run(lambda: self.inner.get_range(key, start, end))

    def size(self, key: str) -> int:
        return self._run(lambda: self.inner.size(key))

    def delete_many(self, keys: Iterable[str]) -> None:
        batch = list(keys)
        self._run(lambda: self.inner.delete_many(batch))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return iter(self._run(lambda: list(self.inner.list(prefix))))


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
