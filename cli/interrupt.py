"""Ctrl-C and SIGTERM for commands that stop at a safe point (`silt produce`, `silt consume
--follow`): the signal is recorded, and raises only where the command waits for input, so it
never lands half-way through handing a record to the agent. A second signal while the
command finishes (a flush that hangs) exits at once."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, the shell's code for Ctrl-C


class Interrupted(Exception):
    """Raised by the handler while the command waits for input (see `Stop.waiting`)."""


@dataclass
class Stop:
    """Set by SIGINT/SIGTERM. `signum` is the first signal received (None: none yet);
    `waiting` is True only while the command blocks where an interruption loses nothing."""

    signum: int | None = None
    waiting: bool = False

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @contextmanager
    def wait(self) -> Iterator[None]:
        """Mark a blocking read: a signal now (or one already received) raises Interrupted."""
        if self.requested:
            raise Interrupted
        self.waiting = True
        try:
            yield
        finally:
            self.waiting = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None and not self.waiting:  # a second one: give up waiting
            sys.stdout.flush()
            print(f"silt: second {signal.Signals(signum).name}: exiting now; records in"
                  " flight may or may not be committed (the offsets printed are)",
                  file=sys.stderr, flush=True)
            os._exit(EXIT_INTERRUPTED)
        if self.signum is None:
            self.signum = signum
        if self.waiting:
            self.waiting = False
            raise Interrupted


@contextmanager
def stop_on_signals() -> Iterator[Stop]:
    """Record SIGINT/SIGTERM in a `Stop` for the duration (main thread only); the previous
    handlers are restored afterwards."""
    stop = Stop()
    previous = {sig: signal.signal(sig, stop._handle) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
