"""`silt agent` as a child process on a free port: what the protocol tests and the wire
benchmark drive with real Kafka clients (one launcher for both, so neither imports the other).

The child runs `python -m cli` from this checkout (PYTHONPATH points at `REPO`), so it serves
the code of the tree that started it. Not shipped: `REPO` is the checkout this file is in.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Self

from metadata import MetadataStore

REPO = Path(__file__).resolve().parents[1]
STARTUP_S = 60.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# /proc/<pid>/stat: "pid (comm) state ...", fields numbered from 1; utime is 14, stime 15.
_UTIME, _STIME = 14, 15
_AFTER_COMM = 3  # the first field after "(comm)"


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when unreadable)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORTS = random.SystemRandom()  # never a seeded sequence shared by two processes
_LOWEST = 10000


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now, chosen at random below the
    kernel's ephemeral range. A port from bind(0) is an ephemeral one: any outgoing
    connection may take it as its source port before the child binds it (EADDRINUSE,
    about one agent start in 15 on a loaded machine); below the range only another
    free_port can pick it."""
    high = _ephemeral_low() - 1
    for _ in range(100) if high > _LOWEST + 1000 else ():
        port = _PORTS.randint(_LOWEST, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # no room below the range: the kernel's choice
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


class PortTaken(RuntimeError):
    """The agent could not bind a port chosen for it: another process took it first."""


@dataclass
class AgentProcess:
    """One `python -m cli agent` process on a free port of 127.0.0.1, its output in
    `log_path`. Settings come from the environment (`SILT_AGENT_*`): `DEFAULT_ENV` under
    `extra_env`."""

    DEFAULT_ENV: ClassVar[Mapping[str, str]] = {}

    store_url: str
    metadata_url: str
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    # What runs `silt` (a test-only entry point may wrap it: tests/protocol/crashing_agent.py)
    entry: list[str] = field(default_factory=lambda: ["-m", "cli"])
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    # Listeners beside the PLAINTEXT one on `port`: name -> security protocol, each on a
    # free port of its own (`ports`, chosen at the first start).
    listeners: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def address(self, listener: str) -> str:
        """HOST:PORT of one of the extra `listeners`."""
        return f"127.0.0.1:{self.ports[listener]}"

    def reserve_ports(self) -> None:
        """Choose the extra listeners' ports now (to advertise them before `start`)."""
        for name in self.listeners:
            if name not in self.ports:
                self.ports[name] = free_port()

    def _listen(self) -> tuple[str, dict[str, str]]:
        """The --listen value and the environment naming the listeners' protocols."""
        if not self.listeners:
            return self.bootstrap, {}
        self.reserve_ports()
        listen = ",".join([f"PLAINTEXT://{self.bootstrap}",
                           *(f"{n}://{self.address(n)}" for n in self.listeners)])
        protocols = ",".join(f"{n}:{p}" for n, p in {"PLAINTEXT": "PLAINTEXT",
                                                      **self.listeners}.items())
        return listen, {"SILT_AGENT_LISTENER_SECURITY_PROTOCOL_MAP": protocols}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, same_port: bool = False) -> Self:
        """Start the agent and return once it accepts connections and has registered (its
        "listening on" line: Metadata lists it as a broker from then on): on a free port, or
        on its last one (`same_port`: a restart keeps its agent id, the advertised address).
        A free port another process takes before the agent binds it (tests run in parallel)
        is given up for new ones, twice at most, unless `same_port` asks for the same."""
        for attempt in range(3):
            if not (same_port and self.port):
                self.port = free_port()
            try:
                return self._launch()
            except PortTaken:
                if same_port or attempt == 2:
                    raise
                self.ports = {}  # new ones for the extra listeners too
        raise AssertionError("unreachable")

    def _launch(self) -> Self:
        """One start on the chosen ports (PortTaken: one of them was not free)."""
        listen, protocols = self._listen()
        env = {**os.environ, **self.DEFAULT_ENV, **protocols, **self.extra_env,
               "PYTHONPATH": str(REPO)}
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, *self.entry, "--store", self.store_url, "--metadata",
                 self.metadata_url, "agent", "--listen", listen],
                env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_S
        listening = False
        while True:
            if self.proc.poll() is not None:
                if b"address already in use" in self._log_since(logged):
                    raise PortTaken(self.log())
                raise RuntimeError(f"silt agent exited {self.proc.returncode}:\n{self.log()}")
            try:
                if not listening:  # one probe connection; then the log says the rest
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    listening = True
                if self._registered(logged):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"silt agent did not listen:\n{self.log()}") from None
            time.sleep(0.05)

    def _log_since(self, since: int) -> bytes:
        with self.log_path.open("rb") as f:
            f.seek(since)
            return f.read()

    def _registered(self, since: int) -> bool:
        """Whether the log, past byte `since`, says the agent listens (after registering)."""
        return b" listening on " in self._log_since(since)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send `sig` and wait for the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def cpu_seconds(self) -> float:
        """CPU seconds the agent has used so far, user + system, all its threads (Linux
        /proc/<pid>/stat)."""
        assert self.proc is not None
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces
        utime, stime = int(fields[_UTIME - _AFTER_COMM]), int(fields[_STIME - _AFTER_COMM])
        return (utime + stime) / _CLOCK_TICKS

    def metadata(self) -> MetadataStore:
        """A new handle on the agent's metadata store (close it)."""
        return MetadataStore.open(self.metadata_url)
