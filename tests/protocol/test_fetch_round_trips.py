"""Metadata round trips per Fetch (issue 28: a 100-partition long-poll answered with at most
one): a real `silt agent`, confluent-kafka consuming 100 partitions of 4 topics, read from
the agent's own histogram silt_fetch_metadata_round_trips (every statement, BEGIN, COMMIT
and ping counted: metadata/engine.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness.agent_process import free_port
from tests.telemetry.test_services_metrics import scrape, value

from .server import AgentProcess, Backend

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
