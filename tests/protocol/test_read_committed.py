"""isolation.level=read_committed against a real `silt agent`: confluent-kafka and
kafka-python consumers read below the last stable offset, never an aborted transaction's
record nor a marker, and a consumer waiting at the LSO gets the next records as soon as the
open transaction commits; ListOffsets latest is the LSO; read_uncommitted consumers see
every data record. The transactions are written through the agent's Python API (the
coordinator's path: `Agent.produce_batch`, markers with `coordinator=True`), on both store +
metadata pairs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder

from agent import Agent, AgentConfig
from fileformat.control import build_marker
from objectstore import open_store

from ..idempotence.helpers import client_batch
from .server import AgentProcess, Backend

TOPIC = "txn"


def _unowned(tag: bytes, count: int) -> bytes:
    """A plain batch (no producer id)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i,
                       value=tag + b"-%d" % i, headers=[])
    return bytes(builder.build())


class Writer:
    """The coordinator's side, in process: transactional batches and markers through
    `Agent.produce_batch` on the agents' store and metadata."""

    def __init__(self, backend: Backend) -> None:
        self.md = backend.metadata()
        self.agent = Agent(open_store(backend.store_url), self.md,
                           AgentConfig(linger_ms=3_600_000))
        self.seq: dict[int, int] = {}

    def data(self, tag: bytes, count: int, pid: int | None = None) -> int:
        if pid is None:
            raw = _unowned(tag, count)
        else:
            raw = client_batch(pid, 0, self.seq.get(pid, 0), count, tag=tag,
                               transactional=True)
            self.seq[pid] = self.seq.get(pid, 0) + count
        fut = self.agent.produce_batch(TOPIC, 0, raw)
        self.agent.flush()
        return fut.result()

    def end(self, pid: int, commit: bool) -> int:
        fut = self.agent.produce_batch(TOPIC, 0, build_marker(
            pid, 0, commit=commit, coordinator_epoch=0, timestamp_ms=1_700_000_000_000),
            coordinator=True)
        self.agent.flush()
        return fut.result()

    def close(self) -> None:
        self.agent.close()
        self.md.close()


@pytest.fixture
def writer(backend: Backend) -> Iterator[Writer]:
    w = Writer(backend)
    w.md.create_topic(TOPIC, 1)
    yield w
    w.close()


def _log(w: Writer) -> tuple[int, int, int]:
    """a (plain), b (aborted), c (committed), d (left open), e (plain, after d's start):
    (d's producer id, the LSO, the high watermark)."""
    b, c, d = (w.md.allocate_producer_id() for _ in range(3))
    assert w.data(b"a", 3) == 0
    assert w.data(b"b", 3, b) == 3
    assert w.end(b, commit=False) == 6
    assert w.data(b"c", 3, c) == 7
    assert w.end(c, commit=True) == 10
    assert w.data(b"d", 2, d) == 11
    assert w.data(b"e", 1) == 13
    info = w.md.partitions(TOPIC)[0]
    assert (info.last_stable_offset, info.next_offset) == (11, 14)
    return d, 11, 14


COMMITTED = [(0, b"a-0"), (1, b"a-1"), (2, b"a-2"), (7, b"c-0"), (8, b"c-1"), (9, b"c-2")]
LATER = [(11, b"d-0"), (12, b"d-1"), (13, b"e-0")]


def _confluent(bootstrap: str, isolation: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "error",
                         "isolation.level": isolation, "fetch.wait.max.ms": 200_000,
                         "socket.timeout.ms": 300_000})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    return consumer


def _watermarks(bootstrap: str, isolation: str) -> tuple[int, int]:
    """ListOffsets earliest and latest from a consumer of that isolation level (its own
    connection: a parked fetch would hold a ListOffsets behind it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "isolation.level": isolation})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)
        return low, high
    finally:
        consumer.close()


def _poll(consumer: Consumer, count: int, timeout: float = 30) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        offset, value = msg.offset(), msg.value()
        assert offset is not None and value is not None
        got.append((offset, value))
    return got


def test_confluent_read_committed(any_agent: AgentProcess, writer: Writer) -> None:
    d, lso, hw = _log(writer)
    consumer = _confluent(any_agent.bootstrap, "read_committed")
    try:
        assert _poll(consumer, len(COMMITTED)) == COMMITTED
        assert _poll(consumer, 1, timeout=3) == []  # d is open: nothing past the LSO
        assert _watermarks(any_agent.bootstrap, "read_committed") == (0, lso)
        assert _watermarks(any_agent.bootstrap, "read_uncommitted") == (0, hw)
        started = time.monotonic()
        writer.end(d, commit=True)  # the LSO moves: the parked fetch is woken
        assert _poll(consumer, len(LATER)) == LATER
        assert time.monotonic() - started < 20  # not the 200 s fetch.wait.max.ms
    finally:
        consumer.close()
    uncommitted = _confluent(any_agent.bootstrap, "read_uncommitted")
    try:
        every = _poll(uncommitted, 12)
        assert every == [*COMMITTED[:3], (3, b"b-0"), (4, b"b-1"), (5, b"b-2"),
                         *COMMITTED[3:], *LATER]
    finally:
        uncommitted.close()


def test_kafka_python_read_committed(any_agent: AgentProcess, writer: Writer) -> None:
    d, lso, hw = _log(writer)
    tp = KTopicPartition(TOPIC, 0)
    consumer = KafkaConsumer(bootstrap_servers=any_agent.bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed", consumer_timeout_ms=5_000)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert [(r.offset, r.value) for r in consumer] == COMMITTED
        assert consumer.end_offsets([tp]) == {tp: lso}
        assert consumer.position(tp) == lso
        writer.end(d, commit=False)  # d aborted: read_committed skips it too
        assert [(r.offset, r.value) for r in consumer] == [(13, b"e-0")]
    finally:
        consumer.close()
    plain = KafkaConsumer(bootstrap_servers=any_agent.bootstrap, enable_auto_commit=False,
                          consumer_timeout_ms=5_000)
    try:
        plain.assign([tp])
        plain.seek(tp, 0)
        assert len(list(plain)) == 12
        assert plain.end_offsets([tp]) == {tp: hw + 1}
    finally:
        plain.close()
