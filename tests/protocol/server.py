"""`silt agent` as a real subprocess for the protocol tests, and a raw kio client."""

from __future__ import annotations

import io
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from metadata import MetadataStore

REPO = Path(__file__).resolve().parents[2]
STARTUP_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class AgentProcess:
    """One `python -m cli agent` process on a free port of 127.0.0.1."""

    store_url: str
    metadata_url: str
    log_path: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    # What runs `silt` (a test-only entry point may wrap it: tests/protocol/crashing_agent.py)
    entry: list[str] = field(default_factory=lambda: ["-m", "cli"])
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> AgentProcess:
        self.port = free_port()
        env = {**os.environ, **self.extra_env, "PYTHONPATH": str(REPO),
               "SILT_AGENT_LINGER_MS": self.extra_env.get("SILT_AGENT_LINGER_MS", "50")}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, *self.entry, "--store", self.store_url, "--metadata",
                 self.metadata_url, "agent", "--listen", self.bootstrap],
                env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"silt agent exited {self.proc.returncode}:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"silt agent did not listen:\n{self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send `sig` and wait for the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def metadata(self) -> MetadataStore:
        return MetadataStore.open(self.metadata_url)


@dataclass(frozen=True)
class Backend:
    """A store + metadata pair (and the environment reaching them) shared by the agents of
    one test."""

    store_url: str
    metadata_url: str
    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)

    def agent(self, name: str, extra_env: dict[str, str] | None = None,
              entry: list[str] | None = None) -> AgentProcess:
        """An (unstarted) agent on this pair, logging to `<log_dir>/<name>.log`."""
        proc = AgentProcess(self.store_url, self.metadata_url, self.log_dir / f"{name}.log",
                            {**self.env, **(extra_env or {})})
        if entry is not None:
            proc.entry = entry
        return proc

    def metadata(self) -> MetadataStore:
        return MetadataStore.open(self.metadata_url)


class RawClient:
    """Kafka requests over one socket, encoded and decoded with kio (for exact checks)."""

    def __init__(self, port: int, timeout: float = 60) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, api_key: int, version: int, request: Any) -> bytes:
        """A size-prefixed request frame."""
        cls = load_request_schema(api_key, version)
        header_cls = cls.__header_schema__
        self.correlation += 1
        buf = io.BytesIO()
        header = header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                            correlation_id=i32(self.correlation), client_id="raw")
        entity_writer(header_cls)(buf, header)
        entity_writer(cls)(buf, request)
        body = buf.getvalue()
        return struct.pack(">i", len(body)) + body

    def read_frame(self) -> bytes | None:
        """The next response frame's bytes, or None if the server closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        body = self._read(struct.unpack(">i", head)[0])
        return body

    def _read(self, n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            part = self.sock.recv(n - len(out))
            if not part:
                return None
            out += part
        return out

    def call(self, api_key: int, version: int, request: Any,
             response_version: int | None = None) -> Any:
        """Send a request and decode its response (of `response_version`, default the same)."""
        self.send_raw(self.frame(api_key, version, request))
        return self.receive(api_key, version if response_version is None else response_version)

    def receive(self, api_key: int, version: int) -> Any:
        """Read and decode the response to the last request sent (`send_raw(frame(...))`)."""
        body = self.read_frame()
        assert body is not None, "server closed the connection"
        cls = load_response_schema(api_key, version)
        header, n = entity_reader(cls.__header_schema__)(body, 0)
        assert header.correlation_id == self.correlation
        response, _ = entity_reader(cls)(body, n)
        return response

    def closed_by_server(self) -> bool:
        """Whether the server closes this connection (reads until EOF)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
