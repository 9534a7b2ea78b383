"""Metadata round trips per Fetch (issue 28: a 100-partition long-poll answered with at most
one): a real `silt agent`, confluent-kafka consuming 100 partitions of 4 topics, read from
the agent's own histogram silt_fetch_metadata_round_trips (every statement, BEGIN, COMMIT
and ping counted: metadata/engine.py)."""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.fetch.v12 import request as f12
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from agent import Agent, AgentConfig
from harness.agent_process import free_port
from metadata import MetadataStore
from metadata.notify import DATA_VERSION_POLL_S
from objectstore import open_backend
from tests.telemetry.test_services_metrics import scrape, value

from .server import AgentProcess, Backend, RawClient, local_context, serve_in_process
from .test_raw import batch, produce

TOPICS, PER_TOPIC = 4, 25  # 100 partitions
WAIT_S = 60.0
LONG_POLL_MS = 300  # each caught-up fetch waits this long for data
CAUGHT_UP_FETCHES = 5
# No heartbeat commits during the test: on SQLite every commit of any kind wakes a
# long-poll (metadata/notify.py), which would re-read for nothing.
QUIET = {"SILT_METADATA_BROKER_HEARTBEAT_INTERVAL_MS": "600000",
         "SILT_METADATA_BROKER_SESSION_TIMEOUT_MS": "1200000"}
HISTOGRAM = "silt_fetch_metadata_round_trips"


@dataclass(frozen=True)
class Trips:
    """The agent's Fetch round-trip histogram at one moment: fetches, round trips, and
    fetches that cost at most one and at most two."""

    fetches: float
    total: float
    at_most_one: float
    at_most_two: float

    def __sub__(self, other: Trips) -> Trips:
        return Trips(self.fetches - other.fetches, self.total - other.total,
                     self.at_most_one - other.at_most_one,
                     self.at_most_two - other.at_most_two)


def trips(metrics_port: int) -> Trips:
    samples = scrape(metrics_port)
    return Trips(value(samples, f"{HISTOGRAM}_count") or 0.0,
                 value(samples, f"{HISTOGRAM}_sum") or 0.0,
                 value(samples, f"{HISTOGRAM}_bucket", le="1.0") or 0.0,
                 value(samples, f"{HISTOGRAM}_bucket", le="2.0") or 0.0)


@pytest.fixture
def agent(backend: Backend) -> Iterator[tuple[AgentProcess, int]]:
    with backend.metadata() as md:
        for t in range(TOPICS):
            md.create_topic(f"rt{t}", PER_TOPIC)
    metrics_port = free_port()
    proc = backend.agent("agent", {**QUIET,
                                   "SILT_AGENT_METRICS_LISTENERS": f"127.0.0.1:{metrics_port}"})
    proc.start()
    try:
        yield proc, metrics_port
    finally:
        proc.terminate()


def test_a_100_partition_long_poll_costs_at_most_one_round_trip(
        agent: tuple[AgentProcess, int], backend: Backend) -> None:
    proc, metrics_port = agent
    partitions = [(f"rt{t}", p) for t in range(TOPICS) for p in range(PER_TOPIC)]
    producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all", "linger.ms": 5})
    for topic, p in partitions:
        producer.produce(topic, b"v", partition=p)
    assert producer.flush(WAIT_S) == 0
    # The SQLite watcher hears the flush's commits within a poll: before the reads below,
    # or its late notification forgets what they kept (a caught-up fetch then reads once).
    time.sleep(4 * DATA_VERSION_POLL_S)
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": LONG_POLL_MS})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for topic, p in partitions])
        # First pass: every partition read from 0, each Fetch in one statement.
        start = trips(metrics_port)
        got = 0
        while got < len(partitions):
            msg = consumer.poll(WAIT_S)
            assert msg is not None and msg.error() is None
            got += 1
        first = trips(metrics_port) - start
        assert first.fetches >= 1 and first.at_most_one == first.fetches, first
        # Caught up: long-polls that wait and return nothing read nothing at all.
        start = trips(metrics_port)
        while (trips(metrics_port) - start).fetches < CAUGHT_UP_FETCHES:
            assert consumer.poll(LONG_POLL_MS / 1000) is None
        caught_up = trips(metrics_port) - start
        assert caught_up.total == 0, caught_up
        # Woken: one record committed while the consumer long-polls; the fetch it wakes
        # re-reads in one statement. On SQLite every commit wakes, and a flush commits twice
        # (its pending row, then the file): a woken fetch there may re-read twice.
        start = trips(metrics_port)
        producer.produce("rt2", b"woken", partition=7)
        assert producer.flush(WAIT_S) == 0
        msg = consumer.poll(WAIT_S)
        assert msg is not None and msg.error() is None
        assert (msg.topic(), msg.partition(), msg.value()) == ("rt2", 7, b"woken")
        woken = trips(metrics_port) - start
        bound = woken.at_most_two if backend.metadata_url.startswith("sqlite") \
            else woken.at_most_one
        assert woken.fetches >= 1 and bound == woken.fetches, woken
    finally:
        consumer.close()


WOKEN_POLLS = 8


def test_long_polls_woken_together_share_one_read(tmp_path: Path) -> None:
    """WOKEN_POLLS long-polls, each on its own caught-up partition, woken by one
    notification: one read of all their offsets (agent/protocol/states.py, the refresh)
    looks at every one (none is woken: nothing new); a record in one partition, one
    more read for all, and one of that partition's own for the fetch that returns it.
    In process, to count the metadata store's reads."""
    store = open_backend(f"file://{tmp_path}/objects")
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("woken", WOKEN_POLLS)
    agent = Agent(store, md, AgentConfig(linger_ms=0))
    ctx = local_context(agent, md, store)
    ctx.states.hearing = lambda: True  # only this agent commits: its own notifications
    reads: list[tuple[str, int]] = []  # (which read, partitions asked)
    read_from, read_offsets = md.partitions_from, md.partition_offsets

    def counted_from(wanted: Any, *, limit: int) -> Any:
        reads.append(("from", len(wanted)))
        return read_from(wanted, limit=limit)

    def counted_offsets(topics: Any, partitions: Any) -> Any:
        reads.append(("offsets", len(partitions)))
        return read_offsets(topics, partitions)

    md.partitions_from = counted_from  # type: ignore[method-assign]
    md.partition_offsets = counted_offsets  # type: ignore[method-assign]
    clients: list[RawClient] = []
    try:
        with serve_in_process(ctx) as server:
            clients = [RawClient(server.port, timeout=WAIT_S) for _ in range(WOKEN_POLLS)]
            for p, c in enumerate(clients):
                c.send_raw(c.frame(1, 12, f12.FetchRequest(
                    max_wait=i32Timedelta.parse(timedelta(seconds=WAIT_S)), min_bytes=i32(1),
                    max_bytes=i32(1 << 20), isolation_level=i8(0),
                    topics=(f12.FetchTopic(topic=TopicName("woken"), partitions=(
                        f12.FetchPartition(partition=i32(p), fetch_offset=i64(0),
                                           partition_max_bytes=i32(1 << 20)),)),),
                    forgotten_topics_data=())))
            assert ctx.loop is not None
            loop = ctx.loop

            def on_loop(fn: Callable[[], Any]) -> Any:
                async def call() -> Any:
                    return fn()
                return asyncio.run_coroutine_threadsafe(call(), loop).result(WAIT_S)

            deadline = time.monotonic() + WAIT_S
            while len(on_loop(ctx.states.waiting)) < WOKEN_POLLS:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            def settle(parked: int) -> None:
                """Until the refresh that read is done and `parked` long-polls wait again
                (no fixed sleep: a slow machine's read takes as long as it takes)."""
                states = ctx.states
                deadline = time.monotonic() + WAIT_S
                while not (reads and on_loop(lambda: (
                        (states._refresh is None or states._refresh.done())
                        and len(states.waiting()) == parked))):
                    assert time.monotonic() < deadline, reads
                    time.sleep(0.01)

            reads.clear()
            on_loop(ctx.notify_commit)  # nothing new: each re-reads (shared) and waits again
            settle(WOKEN_POLLS)
            assert reads == [("offsets", WOKEN_POLLS)]
            assert not select.select([c.sock for c in clients], [], [], 0)[0]  # none answered
            producer = RawClient(server.port, timeout=WAIT_S)
            clients.append(producer)
            assert produce(producer, {("woken", 3): batch(1)}) == {("woken", 3): (0, 0)}
            answer = clients[3].receive(1, 12).responses[0].partitions[0]
            assert (answer.high_watermark, len(answer.records or b"") > 0) == (1, True)
            settle(WOKEN_POLLS - 1)
            # One read for all, then the fetch of partition 3 reads its records' segments.
            assert reads == [("offsets", WOKEN_POLLS)] * 2 + [("from", 1)], reads
            assert not select.select([c.sock for c in clients], [], [], 0)[0]
    finally:
        for c in clients:
            c.close()
        agent.close()
        md.close()
