"""`Periodic`: a task called every interval of the injected clock on its own daemon thread
(so a ManualClock test drives it without sleeping). The agent's housekeeping timers and the
compactor service's retention and GC timers are built on it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Self

from . import Clock

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

    def start(self, *, now: bool = False) -> Self:
        """Start the thread; the first call is due one interval from now (`now`: at once)."""
        first = self._clock.monotonic() + (0 if now else self._interval_s)
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
