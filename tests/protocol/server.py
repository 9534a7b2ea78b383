"""`silt agent` as a real subprocess for the protocol tests, a `Server` in process (for tests
that hold a gate or inject a failure), and a raw kio client."""

from __future__ import annotations

import asyncio
import io
import socket
import struct
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from agent import Agent, AgentConfig
from agent.listeners import PLAINTEXT, Listener
from agent.protocol.cache import SegmentCache
from agent.protocol.context import ServerContext
from agent.protocol.server import Server
from harness import agent_process
from harness.agent_process import REPO
from metadata import MetadataStore
from objectstore import ObjectStore

__all__ = ["REPO", "AgentProcess", "Backend", "RawClient", "serve_in_process"]

IN_PROCESS_WAIT_S = 60.0


class AgentProcess(agent_process.AgentProcess):
    """The product's launcher with a 50 ms linger unless `extra_env` sets one (tests wait
    for acks less)."""

    DEFAULT_ENV: ClassVar[Mapping[str, str]] = {"SILT_AGENT_LINGER_MS": "50"}


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
        return MetadataStore.open(self.metadata_url, create=True)


def local_context(agent: Agent, md: MetadataStore, store: ObjectStore,
                  config: AgentConfig | None = None, cache_bytes: int = 1 << 20) -> ServerContext:
    """The context of an in-process server for `agent` (advertised at 127.0.0.1), with a
    segment cache of `cache_bytes`."""
    return ServerContext(agent=agent, metadata=md, store=store,
                         advertised={"PLAINTEXT": ("127.0.0.1", 0)},
                         cache=SegmentCache(store, cache_bytes), config=config or AgentConfig())


@contextmanager
def serve_in_process(ctx: ServerContext) -> Iterator[Server]:
    """A `Server` for `ctx` on 127.0.0.1 (a free port: `server.port`), run by an event loop
    on its own thread; at exit stopped (it flushes ctx's agent), every task left reaped, the
    loop and ctx's thread pool closed. Closing the agent and the metadata store is the
    caller's."""
    server = Server(ctx, [Listener(PLAINTEXT, PLAINTEXT, "127.0.0.1", 0)])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-server-loop", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(IN_PROCESS_WAIT_S)
        yield server
    finally:
        try:
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(IN_PROCESS_WAIT_S)
            asyncio.run_coroutine_threadsafe(_reap(), loop).result(IN_PROCESS_WAIT_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
            ctx.pool.shutdown()


async def _reap() -> None:
    """Cancel and finish what is left on the loop (as `asyncio.run` does before it closes
    one), so no connection's socket is left to the garbage collector."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


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
