"""The one clock of siltstream, injected wherever time matters.

Product code never reads `time.time()` / `time.monotonic()` itself: it asks a `Clock` for
wall time in epoch milliseconds (record timestamps, retention, lease expiry, compaction lag)
and for monotonic seconds (linger, heartbeats, deadlines), and waits on conditions through
it. `SystemClock` is the real one; `ManualClock` is the one fake, whose time moves only when
told to and whose waits wake when it moves, so linger, leases and retention are testable
without sleeping.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "ManualClock", "Periodic", "SystemClock"]


class Clock(Protocol):
    """Wall time, monotonic time, and waits that follow them."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> bool:
        """`cond.wait(timeout)` measured on this clock (the caller holds `cond`)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass on this clock."""
        ...


class SystemClock:
    """The machine's clocks."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, cond: threading.Condition, timeout: float | None) -> bool:
        return cond.wait(timeout)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()

# A ManualClock wait also returns after this many real seconds, so a missed wake-up costs
# a re-check, never a hang (callers re-check their condition in a loop anyway).
_MANUAL_WAIT_CAP_S = 1.0


class ManualClock:
    """A clock that moves only on `advance` (or `sleep`): the test and benchmark fake.

    Monotonic time is the wall time in seconds. Threads waiting through `wait` are woken on
    every `advance`, so a linger or a lease deadline passes as soon as the test moves time
    past it.
    """

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now = now_ms
        self._lock = threading.Lock()
        self._waiting: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    def now_ms(self) -> int:
        return self._now

    def monotonic(self) -> float:
        return self._now / 1000

    def wait(self, cond: threading.Condition, timeout: float | None) -> bool:
        if timeout is not None and timeout <= 0:
            return False
        with self._lock:
            self._waiting.add(cond)
        return cond.wait(_MANUAL_WAIT_CAP_S)

    def sleep(self, seconds: float) -> None:
        self.advance(round(seconds * 1000))

    def advance(self, ms: int) -> None:
        """Move time forward by `ms` and wake every thread waiting on this clock."""
        if ms < 0:
            raise ValueError(f"a clock never goes back (advance by {ms} ms)")
        self._now += ms
        with self._lock:
            waiting = list(self._waiting)
        for cond in waiting:
            with cond:
                cond.notify_all()

    def set(self, now_ms: int) -> None:
        """Jump to `now_ms` (forward only)."""
        self.advance(now_ms - self._now)


from .periodic import Periodic  # noqa: E402 - built on the Clock protocol above
