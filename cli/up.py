"""`silt up`: a Kafka endpoint with compaction running, in one command.

It runs `silt agent` and `silt compactor`, the commands an operator runs, as two child
processes with this command's settings (the same --config, --store and --metadata, the
environment) and supervises them. Children rather than threads of one process: a merge is
CPU-bound Python and would take the GIL from the agent's event loop (produce acks would
wait), and each child is exactly the service it is in production (its own shutdown, logs
and, once it has one, metrics port).

- The caller opens (migrates) the metadata store first, so the children never race to
  create a fresh database.
- The compactor starts once the agent listens. If either exits on its own, the other is
  stopped and `run_up` answers 1.
- SIGTERM or SIGINT (Ctrl-C): SIGTERM to both (a terminal's Ctrl-C reaches them too; a
  repeated signal changes nothing for them). Each stops cleanly: the agent deregisters,
  flushes and answers what it read; the compactor finishes or abandons its job within
  compactor.shutdown.timeout.ms and releases its lease. 0 when both stop cleanly (exit 0, or
  killed by that signal before they had set up their handlers). A second signal
  kills them (SIGKILL): acked records are committed already; a leased job waits lease.ms.
- On Linux each child gets SIGTERM if this process dies (PR_SET_PDEATHSIG): a killed
  `silt up` leaves no orphan behind.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)

POLL_S = 0.1
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def silt(args: Sequence[str]) -> list[str]:
    """The command line of a child `silt` running this interpreter's installation."""
    return [sys.executable, "-m", "cli", *args]


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux only)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def listening(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port now."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class Child:
    """One supervised `silt` process."""

    name: str
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls, name: str, args: Sequence[str]) -> Child:
        preexec: Callable[[], None] | None = (_die_with_parent if sys.platform == "linux"
                                              else None)
        proc = subprocess.Popen(silt(args), preexec_fn=preexec)  # this process has one thread
        log.info("started %s (pid %d)", name, proc.pid, extra={"child": name, "pid": proc.pid})
        return cls(name, proc)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            self.proc.send_signal(sig)


def run_up(agent_args: Sequence[str], compactor_args: Sequence[str],
           endpoint: tuple[str, int], ready: str) -> int:
    """Run both children until a signal or until one exits; the exit code for `silt up`.
    `endpoint`: where to check that the agent listens; `ready`: logged once it does."""
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)  # no locks in a handler; the loop below acts on it

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    children = [Child.start("agent", agent_args)]
    while not received and children[0].alive and not listening(*endpoint):
        time.sleep(POLL_S)
    if not received and children[0].alive:
        children.append(Child.start("compactor", compactor_args))
        log.warning("%s", ready)
    while not received and all(c.alive for c in children):
        time.sleep(POLL_S)
    exited = [c for c in children if not c.alive]
    for c in exited:
        log.error("silt up: the %s exited with code %d; stopping the rest", c.name,
                  c.proc.returncode)
    if received:
        log.warning("silt up stopping (%s): the agent flushes, the compactor finishes or"
                    " abandons its job; a second signal kills them",
                    signal.Signals(received[0]).name)
    for c in children:
        c.signal(signal.SIGTERM)
    stopping_since = len(received)
    while any(c.alive for c in children):
        if len(received) > stopping_since:  # asked again while stopping: kill
            for c in children:
                c.signal(signal.SIGKILL)
        time.sleep(POLL_S)
    codes = {c.name: c.proc.returncode for c in children}
    log.info("silt up stopped: %s", ", ".join(f"{k} exited {v}" for k, v in codes.items()),
             extra={"exit_codes": codes})
    # A child stopped by the signal itself (it came before the child set up its handlers)
    # had nothing to finish yet: that is a clean stop too.
    clean = (0, -signal.SIGTERM, -signal.SIGINT) if received else (0,)
    return 0 if not exited and all(code in clean for code in codes.values()) else 1
