"""The front door of a real `silt agent`: frames that used to kill it close only their own
connection while confluent-kafka keeps producing and consuming; connection limits
(max.connections, max.connections.per.ip, connections.max.idle.ms, request.read.timeout.ms)
close what they should, with a log line under --verbose and a count by reason in /metrics;
and queued request bytes stay under their caps while replies are held back (in process,
behind a gated object store)."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.api_versions.v3 import request as av3
from kio.schema.produce.v9 import request as p9
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from agent import Agent, AgentConfig
from agent.protocol import server as server_module
from agent.protocol.server import Server
from faults import GatedStore
from fileformat import build_batch
from harness.agent_process import free_port
from metadata import MetadataStore
from objectstore import open_backend

from ..telemetry.test_services_metrics import scrape, value
from .server import AgentProcess, Backend, RawClient, local_context, serve_in_process
from .test_bounds import KILLERS, encode
from .test_clients import _confluent_consume

WAIT_S = 30.0
# A ListGroups v4 frame whose body is random bytes (one of the kills).
RANDOM_LIST_GROUPS = struct.pack(">ihhih", 16, 16, 4, 9, -1) + bytes.fromhex("ffffffff7f00")


def _until(done: Callable[[], bool], what: str, logs: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}\n{logs()}"
        time.sleep(0.02)


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (reads until EOF or reset)."""
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S,
                                    source_address=(source, 0))
    return sock


def _verbose_agent(tmp_path: Path, limits: dict[str, str]) -> Iterator[tuple[AgentProcess, int]]:
    """`silt --verbose agent` with a metrics port and these settings, and a topic `t`."""
    backend = Backend(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db", tmp_path)
    with backend.metadata() as md:
        md.create_topic("t", 1)
    metrics_port = free_port()
    proc = backend.agent("agent", {"SILT_AGENT_METRICS_LISTENERS": f"127.0.0.1:{metrics_port}",
                                   **limits}, entry=["-m", "cli", "--verbose"])
    proc.start()
    try:
        yield proc, metrics_port
    finally:
        proc.terminate()


@pytest.fixture
def verbose_agent(tmp_path: Path) -> Iterator[tuple[AgentProcess, int]]:
    yield from _verbose_agent(tmp_path, {})


@pytest.fixture
def limited_agent(tmp_path: Path) -> Iterator[tuple[AgentProcess, int]]:
    """Small limits: idle after 1 s, a frame within 0.5 s, 4 connections per address and 6
    in all; log.level debug (idle closes are said at debug, as Kafka does)."""
    yield from _verbose_agent(tmp_path, {"SILT_AGENT_LOG_LEVEL": "debug",
                                         "SILT_AGENT_CONNECTIONS_MAX_IDLE_MS": "1000",
                                         "SILT_AGENT_REQUEST_READ_TIMEOUT_MS": "500",
                                         "SILT_AGENT_MAX_CONNECTIONS_PER_IP": "4",
                                         "SILT_AGENT_MAX_CONNECTIONS_TOTAL": "6"})


def test_killer_frames_close_their_connection_and_clients_keep_working(
        verbose_agent: tuple[AgentProcess, int]) -> None:
    agent, metrics_port = verbose_agent
    for frame in [*KILLERS, RANDOM_LIST_GROUPS]:
        with _connect(agent.port) as sock:
            sock.sendall(frame)
            assert _closed(sock)
    assert agent.proc is not None and agent.proc.poll() is None, agent.log()
    producer = Producer({"bootstrap.servers": agent.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(20):
        producer.produce("t", b"v%d" % i, b"k%d" % i, partition=0)
    assert producer.flush(WAIT_S) == 0
    got = _confluent_consume(agent.bootstrap, "t", 0, 0, 20)
    assert [(o, k, v) for _, o, k, v, _ in got] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(20)]
    assert agent.proc.poll() is None
    log = agent.log()
    assert log.count("malformed API") >= 3, log  # one INFO line each
    assert "array of 34359738366 elements" in log and "Traceback" not in log
    samples = scrape(metrics_port)
    assert (value(samples, "silt_connections_refused_total", reason="malformed_request")
            or 0) >= 3


def test_connection_limits_close_what_they_should(
        limited_agent: tuple[AgentProcess, int]) -> None:
    agent, metrics_port = limited_agent
    # The launcher's readiness probe may still count as open: start from none.
    deadline = time.monotonic() + 10
    while value(scrape(metrics_port), "silt_connections") != 0:
        assert time.monotonic() < deadline, "the launcher's probe connection stayed open"
        time.sleep(0.05)
    # max.connections.per.ip (4): the fifth from 127.0.0.1 is closed, the first four are not.
    local = [_connect(agent.port) for _ in range(4)]
    extra = _connect(agent.port)
    assert _closed(extra)
    # max.connections (6): two more from another address are taken, a third is closed.
    other = [_connect(agent.port, "127.0.0.2") for _ in range(2)]
    third = _connect(agent.port, "127.0.0.2")
    assert _closed(third)
    # connections.max.idle.ms (1 s): all of them, sending nothing, are closed.
    started = time.monotonic()
    for sock in [*local, *other]:
        assert _closed(sock)
        sock.close()
    assert time.monotonic() - started < 10
    extra.close()
    third.close()
    # A connection that keeps asking is not idle: ApiVersions every 300 ms for 2 s.
    client = RawClient(agent.port, timeout=WAIT_S)
    try:
        for _ in range(7):
            client.call(18, 3, av3.ApiVersionsRequest(client_software_name="t",
                                                      client_software_version="1"))
            time.sleep(0.3)
    finally:
        client.close()
    # request.read.timeout.ms (500 ms): a 50 MiB frame trickling a byte at a time is cut.
    with _connect(agent.port) as slow:
        slow.sendall(struct.pack(">i", 50 << 20))
        cut = False
        for _ in range(50):
            try:
                slow.sendall(b"\0")
            except OSError:
                cut = True
                break
            time.sleep(0.1)
        assert cut or _closed(slow)
    log = agent.log()
    for said in ("(max.connections.per.ip)", "(max.connections.total)",
                 "(connections.max.idle.ms)", "(request.read.timeout.ms)"):
        assert said in log, log
    samples = scrape(metrics_port)
    for reason in ("max_connections", "max_connections_per_ip", "idle", "read_timeout"):
        assert (value(samples, "silt_connections_refused_total", reason=reason) or 0) >= 1, \
            reason


# --------------------------------------------------------------------------- queued bytes

VALUE_BYTES = 1000
FRAMES = 12


def _produce(tag: bytes) -> p9.ProduceRequest:
    return p9.ProduceRequest(
        transactional_id=None, acks=i16(-1),
        timeout=i32Timedelta.parse(timedelta(seconds=30)),
        topic_data=(p9.TopicProduceData(name=TopicName("q"), partition_data=(
            p9.PartitionProduceData(index=i32(0), records=Records(
                build_batch([(0, 1_000, None, tag.ljust(VALUE_BYTES, b"x"), [])]))),)),))


@pytest.fixture
def gated_server(tmp_path: Path) -> Iterator[tuple[Server, GatedStore]]:
    """An in-process server whose flushes wait at their PUT until the test opens the gate:
    produce replies stay pending, so their request bytes stay queued. Caps: 3 frames per
    connection, 5 in all."""
    store = GatedStore(open_backend(f"file://{tmp_path}/objects"))
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("q", 1)
    frame = len(encode(0, 9, _produce(b"")))
    config = AgentConfig(linger_ms=0, queued_max_request_bytes=5 * frame,
                         queued_max_request_bytes_per_connection=3 * frame)
    agent = Agent(store, md, config)
    ctx = local_context(agent, md, store, config)
    try:
        with serve_in_process(ctx) as server:
            try:
                yield server, store
            finally:
                store.gate.set()
    finally:
        agent.close()
        md.close()


def test_queued_request_bytes_stay_under_their_caps(
        gated_server: tuple[Server, GatedStore]) -> None:
    server, store = gated_server
    config = server.config
    clients = [RawClient(server.port, timeout=WAIT_S) for _ in range(2)]
    try:
        for n, client in enumerate(clients):
            client.send_raw(b"".join(client.frame(0, 9, _produce(b"c%d-%d" % (n, i)))
                                     for i in range(FRAMES)))
        # The first connection reads up to its cap (3 frames), the second up to the total
        # (5): then neither reads on while the first flush waits at its PUT.
        _until(lambda: store.waiting == 1, "a flush waits at its PUT")
        time.sleep(0.5)
        queued = [c.queued for c in server._conns]
        assert server._queued <= config.queued_max_request_bytes
        assert all(q <= config.queued_max_request_bytes_per_connection for q in queued)
        assert sum(queued) == server._queued > 0
        store.gate.set()  # replies free room: every frame is read and answered in order
        for client in clients:
            for i in range(FRAMES):
                body = client.read_frame()
                assert body is not None and struct.unpack_from(">i", body)[0] == i + 1
        _until(lambda: server._queued == 0, "every reply freed its bytes")
    finally:
        for client in clients:
            client.close()


def _long_poll(max_wait_ms: int) -> bytes:
    """A framed Fetch v4 of "q" partition 0 from offset 0 (nothing there: it waits), header
    v1 with client id "t"."""
    body = (struct.pack(">hhih", 1, 4, 7, 1) + b"t"
            + struct.pack(">iiiib", -1, max_wait_ms, 1, 1 << 20, 0)
            + struct.pack(">ih", 1, 1) + b"q" + struct.pack(">iiqi", 1, 0, 0, 1 << 20))
    return struct.pack(">i", len(body)) + body


def test_bytes_behind_a_waiting_request_are_not_read_without_bound(
        gated_server: tuple[Server, GatedStore]) -> None:
    """While a request's handler waits (a long-poll), what the client sends behind it is
    read only up to HOLD_BYTES (and one socket read past): the connection stops reading
    and the rest stays in the sockets, then the long-poll is answered and the bytes behind
    it are read on (here a frame too large: the connection closes)."""
    server, _ = gated_server
    sock = _connect(server.port)
    try:
        sock.sendall(_long_poll(3_000))
        _until(lambda: any(c.busy for c in server._conns), "the long-poll waits")
        sock.setblocking(False)
        junk = b"\x7f" * (1 << 20)
        sent = 0
        with contextlib.suppress(BlockingIOError):
            for _ in range(64):  # 64 MiB: more than the sockets hold
                sent += sock.send(junk)
        time.sleep(0.5)
        (conn,) = server._conns
        assert conn.busy and conn.held
        assert len(conn.buffer) <= server_module.HOLD_BYTES + 256 * 1024
        assert sent < 64 << 20  # the sockets filled: the server stopped reading
        sock.setblocking(True)
        sock.settimeout(WAIT_S)
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        assert struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0] == 7  # answered
        assert size > 4
        assert _closed(sock)  # then the junk: a frame of 0x7f7f7f7f bytes
    finally:
        sock.close()
