"""What the server says about the connections it refuses and closes: each counted by reason
(telemetry: silt_connections_refused) and logged in one line, at most LINES_PER_SECOND lines
per reason each second, so a flood of bad frames or connections cannot flood the log (the
lines held back are then counted in one "suppressed" line)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import telemetry

log = logging.getLogger("agent.protocol.server")

LINES_PER_SECOND = 10
WINDOW_S = 1.0


@dataclass(slots=True)
class _Window:
    start: float
    level: int
    lines: int = 0
    suppressed: int = 0


class Refusals:
    """The rate-limited log (and the counter) of one server's refusals and closes."""

    def __init__(self, lines_per_second: int = LINES_PER_SECOND) -> None:
        self.lines_per_second = lines_per_second
        self._windows: dict[str, _Window] = {}

    def refused(self, reason: str, message: str, *args: object,
                level: int = logging.INFO) -> None:
        """Count a refusal of `reason` and log it (rate-limited) at `level`."""
        telemetry.connection_refused(reason)
        self.say(reason, level, message, *args)

    def say(self, key: str, level: int, message: str, *args: object) -> None:
        """Log `message` at `level` unless `key` already had its lines this second."""
        if not log.isEnabledFor(level):
            return
        now = time.monotonic()
        window = self._windows.get(key)
        if window is None or now - window.start >= WINDOW_S:
            if window is not None:
                self._summary(key, window, now)
            window = self._windows[key] = _Window(now, level)
        if window.lines < self.lines_per_second:
            log.log(level, message, *args)
            window.lines += 1
        else:
            window.suppressed += 1

    def flush(self) -> None:
        """Sum up the windows that are over (the server's sweep calls it, so a flood that
        stopped is still said)."""
        now = time.monotonic()
        for key, window in list(self._windows.items()):
            if now - window.start >= WINDOW_S:
                del self._windows[key]
                self._summary(key, window, now)

    @staticmethod
    def _summary(key: str, window: _Window, now: float) -> None:
        if window.suppressed:
            log.log(window.level, "%s: %d more lines suppressed in the last %.1f s", key,
                    window.suppressed, now - window.start)
