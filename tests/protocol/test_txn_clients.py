"""Transactional producers of real client libraries against real `silt agent` processes, on
SQLite and PostgreSQL: commit and abort, consume-transform-produce with the consumer's
offsets in the transaction, zombie fencing, a producer that vanishes mid-transaction.

What is checked is what consumers read (read_committed: committed records only, exactly
once; read_uncommitted: every record) and what the log and the metadata store say once
each transaction ends: its markers (one per partition, after its records), the
partitions' last stable offsets (no transaction left open), the aborted-transaction index,
the transaction's state and the group's committed offsets (visible only once the
transaction commits)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from metadata import MetadataStore
from metadata.models import TXN_COMPLETE_ABORT, TXN_COMPLETE_COMMIT

from .server import AgentProcess, Backend

TOPIC = "tx"


@pytest.fixture
def one(backend: Backend) -> Iterator[tuple[AgentProcess, MetadataStore]]:
    md = backend.metadata()
    md.create_topic(TOPIC, 4)
    md.create_topic("in", 1)
    agent = backend.agent("a", {"SILT_AGENT_LINGER_MS": "20"}).start()
    try:
        yield agent, md
    finally:
        agent.terminate()
        md.close()


def _producer(agent: AgentProcess, txn_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": agent.bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": 60_000, "linger.ms": 5, **extra})


def _ends(md: MetadataStore, topic: str = TOPIC) -> dict[int, tuple[int, int]]:
    """Per partition: (next offset, last stable offset)."""
    return {p.partition: (p.next_offset, p.last_stable_offset) for p in md.partitions(topic)}


def _read_all(agent: AgentProcess, topic: str = TOPIC, *, committed: bool = False
              ) -> list[tuple[int, int, bytes]]:
    """The topic's data records (read_uncommitted: every one; `committed`: read_committed,
    those of committed transactions and plain produces): (partition, offset, value)."""
    consumer = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed" if committed
                         else "read_uncommitted"})
    md_parts = range(4 if topic == TOPIC else 1)
    consumer.assign([TopicPartition(topic, p, 0) for p in md_parts])
    got = []
    deadline = time.monotonic() + 15
    idle = 0
    try:
        while time.monotonic() < deadline and idle < 6:
            msg = consumer.poll(0.5)
            if msg is None:
                idle += 1
                continue
            idle = 0
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            if msg.error() is None and partition is not None and offset is not None:
                got.append((partition, offset, value or b""))
    finally:
        consumer.close()
    return sorted(got)


def test_confluent_commit_and_abort(one: tuple[AgentProcess, MetadataStore]) -> None:
    agent, md = one
    p = _producer(agent, "app")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(TOPIC, value=b"c%d" % i, partition=i % 4)
    p.commit_transaction(30)
    committed = md.load_transaction("app")
    assert committed is not None and committed.state == TXN_COMPLETE_COMMIT
    # 10 records over 4 partitions (3, 3, 2, 2), each followed by its COMMIT marker; no
    # transaction open: the last stable offset is the log end.
    assert _ends(md) == {0: (4, 4), 1: (4, 4), 2: (3, 3), 3: (3, 3)}
    p.begin_transaction()
    for i in range(4):
        p.produce(TOPIC, value=b"a%d" % i, partition=i)
    p.flush(30)
    # Open: each partition's last stable offset is its first record of the transaction.
    assert _ends(md) == {0: (5, 4), 1: (5, 4), 2: (4, 3), 3: (4, 3)}
    p.abort_transaction(30)
    aborted = md.load_transaction("app")
    assert aborted is not None and aborted.state == TXN_COMPLETE_ABORT
    assert _ends(md) == {0: (6, 6), 1: (6, 6), 2: (5, 5), 3: (5, 5)}
    index = md.aborted_transactions([(TOPIC, q, 0, 10) for q in range(4)])
    assert {tp[1]: [(a.first_offset, a.last_offset) for a in txns]
            for tp, txns in index.items()} == {0: [(4, 5)], 1: [(4, 5)], 2: [(3, 4)],
                                                 3: [(3, 4)]}
    # read_uncommitted sees every data record (markers are not records to a consumer),
    # read_committed only the committed transaction's.
    values = [v for _, _, v in _read_all(agent)]
    assert sorted(values) == sorted([b"c%d" % i for i in range(10)]
                                    + [b"a%d" % i for i in range(4)])
    assert sorted(v for _, _, v in _read_all(agent, committed=True)) == sorted(
        b"c%d" % i for i in range(10))


def test_consume_transform_produce(one: tuple[AgentProcess, MetadataStore]) -> None:
    agent, md = one
    seed = Producer({"bootstrap.servers": agent.bootstrap})
    for i in range(6):
        seed.produce("in", value=b"%d" % i, partition=0)
    seed.flush(30)
    consumer = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "etl",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe(["in"])
    p = _producer(agent, "etl-1")
    p.init_transactions(30)
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < 6 and time.monotonic() < deadline:
            msgs = consumer.consume(6, 1.0)
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                p.produce(TOPIC, value=b"x" + (m.value() or b""), partition=0)
            p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                          consumer.consumer_group_metadata(), 30)
            # Before the commit the offsets are held by the transaction, not the group's.
            assert [o.offset for o in md.fetch_offsets("etl")] in ([], [len(seen)])
            p.commit_transaction(30)
            seen += [m.value() or b"" for m in msgs]
            assert [o.offset for o in md.fetch_offsets("etl")] == [len(seen)]
    finally:
        consumer.close()
    assert sorted(seen) == [b"%d" % i for i in range(6)]
    assert md.pending_transaction_offsets("etl-1") == []
    out = [v for _, _, v in _read_all(agent, committed=True)]
    assert sorted(out) == [b"x%d" % i for i in range(6)]  # each input once in the output


def test_zombie_is_fenced(one: tuple[AgentProcess, MetadataStore]) -> None:
    agent, md = one
    old = _producer(agent, "zombie")
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(TOPIC, value=b"old-1", partition=0)
    old.flush(30)
    new = _producer(agent, "zombie")
    new.init_transactions(30)  # fences `old` and aborts its open transaction
    state = md.load_transaction("zombie")
    assert state is not None and state.producer_epoch == 2  # fence bump + the new epoch
    old.produce(TOPIC, value=b"old-2", partition=1)
    with pytest.raises(KafkaException):
        old.commit_transaction(30)
    new.begin_transaction()
    new.produce(TOPIC, value=b"new-1", partition=2)
    new.commit_transaction(30)
    # old-1 is in an aborted transaction; old-2 was never stored.
    assert [(a.first_offset, a.last_offset) for a in md.aborted_transactions(
        [(TOPIC, 0, 0, 10)]).get((TOPIC, 0), [])] == [(0, 1)]
    values = {v for _, _, v in _read_all(agent)}
    assert values == {b"old-1", b"new-1"}
    assert [v for _, _, v in _read_all(agent, committed=True)] == [b"new-1"]
    assert all(lso == end for end, lso in _ends(md).values())


def test_kafka_python_and_aiokafka(one: tuple[AgentProcess, MetadataStore]) -> None:
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    agent, md = one
    kp = KafkaProducer(bootstrap_servers=agent.bootstrap, transactional_id="kp")
    kp.init_transactions()
    kp.begin_transaction()
    kp.send(TOPIC, b"kp", partition=1)
    kp.commit_transaction()
    kp.close()
    kp_state = md.load_transaction("kp")
    assert kp_state is not None and kp_state.state == TXN_COMPLETE_COMMIT

    async def aio() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=agent.bootstrap, transactional_id="aio")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(TOPIC, b"aio", partition=2)
            await producer.begin_transaction()
            await producer.send_and_wait(TOPIC, b"aio-aborted", partition=3)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(aio())
    aio_state = md.load_transaction("aio")
    assert aio_state is not None and aio_state.state == TXN_COMPLETE_ABORT
    assert _ends(md) == {0: (0, 0), 1: (2, 2), 2: (2, 2), 3: (2, 2)}
    assert sorted(v for _, _, v in _read_all(agent, committed=True)) == [b"aio", b"kp"]


def test_a_vanished_producer_is_aborted_after_its_timeout(backend: Backend) -> None:
    md = backend.metadata()
    md.create_topic(TOPIC, 4)
    agent = backend.agent("a", {
        "SILT_AGENT_LINGER_MS": "20",
        "SILT_AGENT_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "300"}
    ).start()
    try:
        p = _producer(agent, "gone", **{"transaction.timeout.ms": 1500})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(TOPIC, value=b"lost", partition=0)
        p.flush(30)
        assert _ends(md)[0] == (1, 0)  # open: the last stable offset is held at 0
        del p  # the producer vanishes (its client never ends the transaction)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _ends(md)[0] != (2, 2):
            time.sleep(0.2)
        assert _ends(md)[0] == (2, 2)  # aborted: the marker written, nothing open
        state = md.load_transaction("gone")
        assert state is not None and state.state == TXN_COMPLETE_ABORT
        assert state.producer_epoch == 1  # the abort bumped the epoch (the producer fenced)
    finally:
        agent.terminate()
        md.close()
