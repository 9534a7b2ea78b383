"""buffer.memory backpressure in the Kafka server: a Produce whose partition finds the
buffer full waits (on the event loop, no thread) up to its timeout_ms for the agent to free
room, while the server keeps serving other connections; past the timeout it gets
REQUEST_TIMED_OUT with nothing stored. The agent's object store is gated so that flushes
stall at their PUT for as long as the test says.

In process (not a subprocess) so that the test holds the gate and sees the agent's
buffer.memory use."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as p9
from kio.schema.types import TopicName
from kio.static.primitive import Records, i16, i32, i32Timedelta

from agent import Agent, AgentConfig, BufferFullError
from agent.producer import ProduceFuture
from agent.protocol.server import Server
from faults import GatedStore
from fileformat import build_batch
from metadata import MetadataStore
from objectstore import open_backend

from .server import RawClient, local_context, serve_in_process
from .test_raw import fetch

WAIT_S = 30.0
VALUE_BYTES = 1000
BATCH_BYTES = len(build_batch([(0, 1_000, None, b"x" * VALUE_BYTES, [])]))
BUFFER_MEMORY = 2 * BATCH_BYTES + BATCH_BYTES // 2  # two batches fit, a third does not
WAITERS = 20  # more than the server's IO threads: waiting must not hold a thread each


@dataclass
class InProcessAgent:
    """A `Server` on its own event loop thread over a gated file store + SQLite."""

    server: Server
    agent: Agent
    store: GatedStore
    metadata: MetadataStore
    full: list[int]  # how many appends found buffer.memory full

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture
def gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessAgent]:
    store = GatedStore(open_backend(f"file://{tmp_path}/objects"))
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("bp", 2)
    agent = Agent(store, md, AgentConfig(linger_ms=0, flush_bytes=1024,
                                         buffer_memory=BUFFER_MEMORY))
    full = [0]
    real = agent.produce_batches

    def counting(*args: Any, **kwargs: Any) -> list[ProduceFuture]:
        try:
            return real(*args, **kwargs)
        except BufferFullError:
            full[0] += 1  # (one pool thread at a time per request: no lock needed for a test)
            raise

    monkeypatch.setattr(agent, "produce_batches", counting)
    ctx = local_context(agent, md, store)
    try:
        with serve_in_process(ctx) as server:
            try:
                yield InProcessAgent(server, agent, store, md, full)
            finally:
                store.gate.set()  # the server's stop flushes the agent
    finally:
        agent.close()
        md.close()


def _send_produce(port: int, partition: int, tag: bytes, timeout_ms: int = 30_000,
                  ) -> RawClient:
    """A connection that sent one Produce (acks=-1) of one batch; read its reply later."""
    client = RawClient(port, timeout=WAIT_S * 2)
    req = p9.ProduceRequest(
        transactional_id=None, acks=i16(-1),
        timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
        topic_data=(p9.TopicProduceData(name=TopicName("bp"), partition_data=(
            p9.PartitionProduceData(index=i32(partition), records=Records(
                build_batch([(0, 1_000, None, tag.ljust(VALUE_BYTES, b"x"), [])]))),)),))
    client.send_raw(client.frame(0, 9, req))
    return client


def _reply(client: RawClient) -> tuple[int, int]:
    """(error code, base offset) of the Produce sent on `client`; closes it."""
    try:
        (p,) = client.receive(0, 9).responses[0].partition_responses
    finally:
        client.close()
    return int(p.error_code), int(p.base_offset)


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def _fill(a: InProcessAgent) -> list[RawClient]:
    """Two produces that fill buffer.memory: the first stalls at its PUT, the second
    waits to be flushed after it."""
    first = _send_produce(a.port, 0, b"first")
    _until(lambda: a.store.waiting == 1, "the first flush waits at its PUT")
    second = _send_produce(a.port, 1, b"second")
    _until(lambda: a.agent.buffer_used == 2 * BATCH_BYTES, "both batches are buffered")
    return [first, second]


def test_full_buffer_makes_produces_wait_while_the_server_serves_others(
        gated: InProcessAgent) -> None:
    filled = _fill(gated)
    waiting = [_send_produce(gated.port, 0, b"w%d" % i) for i in range(WAITERS)]
    _until(lambda: gated.full[0] >= WAITERS, "every waiting produce found the buffer full")
    assert gated.agent.buffer_used == 2 * BATCH_BYTES <= BUFFER_MEMORY
    # The server answers other connections (fetches run in the IO pool) while they wait.
    other = RawClient(gated.port, timeout=WAIT_S)
    try:
        part = fetch(other, "bp", 0, 0)
        assert (part.error_code, part.high_watermark) == (ErrorCode.none, 0)
    finally:
        other.close()
    gated.store.gate.set()  # the object store recovers: room frees, the waiters get in
    assert [_reply(c) for c in filled] == [(0, 0), (0, 0)]
    replies = [_reply(c) for c in waiting]
    assert [e for e, _ in replies] == [0] * WAITERS
    assert sorted(o for _, o in replies) == list(range(1, WAITERS + 1))
    assert gated.metadata.partitions("bp")[0].next_offset == WAITERS + 1


def test_produce_waiting_past_its_timeout_gets_request_timed_out_and_stores_nothing(
        gated: InProcessAgent) -> None:
    filled = _fill(gated)
    late = _send_produce(gated.port, 0, b"late", timeout_ms=200)
    assert _reply(late)[0] == ErrorCode.request_timed_out.value
    assert gated.agent.buffer_used == 2 * BATCH_BYTES
    gated.store.gate.set()
    assert [_reply(c) for c in filled] == [(0, 0), (0, 0)]
    assert [p.next_offset for p in gated.metadata.partitions("bp")] == [1, 1]
    client = RawClient(gated.port, timeout=WAIT_S)
    try:
        records = bytes(fetch(client, "bp", 0, 0).records or b"")
    finally:
        client.close()
    assert b"first" in records and b"late" not in records
