"""Periodic housekeeping of `silt agent` on its own threads, timed by the injected clock
(so a ManualClock test drives it without sleeping): deleting expired producer states every
producer.id.expiration.check.interval.ms, and expired committed offsets every
offsets.retention.check.interval.ms."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Self

from clock import Clock
from metadata import MetadataStore

log = logging.getLogger(__name__)


class Periodic:
    """Calls `task` every `interval_ms` of `clock` (first after one interval, then at a
    fixed rate, as Kafka's scheduler) on a daemon thread, until `stop`. A failing call is
    logged and the next interval tries again."""

    def __init__(self, name: str, interval_ms: int, task: Callable[[], object],
                 clock: Clock) -> None:
        self.name = name
        self._interval_s = interval_ms / 1000
        self._task = task
        self._clock = clock
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        """Start the thread; the first call is due one interval from now."""
        first = self._clock.monotonic() + self._interval_s
        self._thread = threading.Thread(target=self._run, args=(first,), name=self.name,
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop (waits for a call in progress). Idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self, deadline: float) -> None:
        while True:
            with self._cond:
                while not self._stopping and (left := deadline - self._clock.monotonic()) > 0:
                    self._clock.wait(self._cond, left)
                if self._stopping:
                    return
            started = self._clock.monotonic()
            try:
                self._task()
            except Exception:
                log.exception("%s failed (next try in %.0f s)", self.name, self._interval_s)
            # At a fixed rate from the deadlines; intervals already past when this call
            # started (a clock jump, a stall) are skipped. A slow call delays the next one
            # (due during it: it runs at once, once) but never skips it.
            while deadline <= started:
                deadline += self._interval_s


def producer_expiry(metadata: MetadataStore) -> Periodic:
    """The (unstarted) timer deleting producer states idle past producer.id.expiration.ms,
    every producer.id.expiration.check.interval.ms, on the metadata store's clock."""

    def expire() -> None:
        if n := metadata.expire_producers():
            log.info("expired %d idle producer states", n)

    return Periodic("silt-producer-expiry",
                    metadata.config.producer_id_expiration_check_interval_ms, expire,
                    metadata.clock)


def offsets_expiry(metadata: MetadataStore) -> Periodic:
    """The (unstarted) timer deleting committed offsets past offsets.retention.minutes,
    every offsets.retention.check.interval.ms, on the metadata store's clock."""

    def expire() -> None:
        if n := metadata.expire_offsets():
            log.info("expired %d committed offsets", n)

    return Periodic("silt-offsets-expiry",
                    metadata.config.offsets_retention_check_interval_ms, expire,
                    metadata.clock)
