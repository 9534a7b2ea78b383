"""Stock Kafka clients against a real `silt agent` process: produce, consume by assign +
seek, list offsets, long-poll, compacted logs, unknown topics."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import KafkaTimeoutError

from agent import Reader
from compactor import Compactor
from objectstore import open_store

from .server import AgentProcess

Row = tuple[Any, ...]  # partition, offset, key, value, headers


def _expected(n: int, partitions: int, prefix: str) -> dict[int, list[Row]]:
    rows: dict[int, list[Row]] = {p: [] for p in range(partitions)}
    for i in range(n):
        p = i % partitions
        headers: list[tuple[str, str | bytes | None]] = (
            [("n", str(i).encode())] if i % 3 == 0 else [])
        rows[p].append((p, len(rows[p]), f"{prefix}k{i}".encode(), f"{prefix}v{i}".encode() * 5,
                        headers))
    return rows


def _confluent_consume(bootstrap: str, topic: str, partition: int, offset: int,
                       count: int) -> list[Row]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, partition, offset)])
    got: list[Row] = []
    try:
        while len(got) < count:
            msg = consumer.poll(30)
            assert msg is not None, f"no record after {len(got)} of {count}"
            assert msg.error() is None, msg.error()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                        list(msg.headers() or [])))
    finally:
        consumer.close()
    return got


def test_confluent_kafka_produce_and_consume_exactly(any_agent: AgentProcess) -> None:
    md = any_agent.metadata()
    md.create_topic("orders", 4)
    md.close()
    expected = _expected(400, 4, "c")
    acks: list[tuple[Any, ...]] = []
    producer = Producer({"bootstrap.servers": any_agent.bootstrap, "acks": "all",
                         "enable.idempotence": False, "linger.ms": 5})
    for rows in expected.values():
        for p, _, key, value, headers in rows:
            producer.produce("orders", value, key, partition=p, headers=headers,
                             on_delivery=lambda e, m: acks.append((e, m.partition(), m.offset())))
    assert producer.flush(60) == 0
    assert [e for e, _, _ in acks if e is not None] == []
    assert sorted((p, o) for _, p, o in acks) == [(p, o) for p, rows in expected.items()
                                                  for _, o, *_ in rows]
    for p, rows in expected.items():
        assert _confluent_consume(any_agent.bootstrap, "orders", p, 0, len(rows)) == rows
        # from the middle: the batch holding offset 50 is returned, the client skips below
        assert _confluent_consume(any_agent.bootstrap, "orders", p, 50, 10) == rows[50:60]
    consumer = Consumer({"bootstrap.servers": any_agent.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    assert consumer.get_watermark_offsets(TopicPartition("orders", 2), timeout=30) == (0, 100)
    consumer.close()


def test_kafka_python_produce_consume_and_list_offsets(any_agent: AgentProcess) -> None:
    agent_proc = any_agent
    md = agent_proc.metadata()
    md.create_topic("events", 3)
    md.close()
    producer = KafkaProducer(bootstrap_servers=agent_proc.bootstrap)  # defaults: idempotent
    futures = [producer.send("events", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3,
                             headers=[("i", b"%d" % i)], timestamp_ms=1_000_000 + i)
               for i in range(90)]
    producer.flush(60)
    metas = [f.get(60) for f in futures]
    assert [(m.partition, m.offset) for m in metas] == [(i % 3, i // 3) for i in range(90)]
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=agent_proc.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=20_000)
    tp = KTopicPartition("events", 1)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp)
           for _, r in zip(range(30), consumer, strict=False)]
    assert got == [(j, b"k%d" % (3 * j + 1), b"v%d" % (3 * j + 1), [("i", b"%d" % (3 * j + 1))],
                    1_000_000 + 3 * j + 1) for j in range(30)]
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 30}
    by_time = consumer.offsets_for_times({tp: 1_000_000 + 3 * 10 + 1})[tp]
    assert by_time is not None and (by_time.offset, by_time.timestamp) == (10, 1_000_031)
    assert consumer.offsets_for_times({tp: 1_000_032})[tp].offset == 11  # next one after
    assert consumer.offsets_for_times({tp: 2_000_000})[tp] is None  # past every record
    consumer.close()


def test_fetch_at_the_end_long_polls_until_a_record_is_committed(
        agent_proc: AgentProcess) -> None:
    md = agent_proc.metadata()
    md.create_topic("live", 1)
    md.close()
    # fetch.wait.max.ms far above the poll timeout: only a commit notification answers in time
    consumer = Consumer({"bootstrap.servers": agent_proc.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False,  # no group coordinator yet
                         "fetch.wait.max.ms": 200_000, "socket.timeout.ms": 300_000})
    consumer.assign([TopicPartition("live", 0, 0)])
    assert consumer.poll(1) is None  # the fetch is now parked at offset 0
    producer = Producer({"bootstrap.servers": agent_proc.bootstrap, "acks": "all"})
    def produce_one() -> None:
        producer.produce("live", b"hello", b"k")
        producer.flush(30)

    fired = threading.Timer(0.5, produce_one)
    fired.start()
    msg = consumer.poll(60)
    fired.join()
    assert msg is not None and msg.error() is None
    assert (msg.offset(), msg.key(), msg.value()) == (0, b"k", b"hello")
    # The consumer's next fetch is parked for 200 s: SIGTERM answers it and exits 0.
    assert agent_proc.terminate(timeout=60) == 0
    consumer.close()


def test_consume_through_a_compacted_log_keeps_original_offsets(
        any_agent: AgentProcess) -> None:
    agent_proc = any_agent
    md = agent_proc.metadata()
    md.create_topic("users", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                 "segment.bytes": "1024"})
    producer = KafkaProducer(bootstrap_servers=agent_proc.bootstrap, acks="all",
                             enable_idempotence=False, linger_ms=0)
    for round_ in range(3):
        for k in range(10):
            producer.send("users", key=b"u%d" % k, value=b"r%d" % round_, partition=0)
        producer.flush(60)
    producer.close()
    Compactor(open_store(agent_proc.store_url), md).run_once(everything=True)
    survivors = [(r.offset, r.key, r.value) for r in
                 Reader(open_store(agent_proc.store_url), md).read("users", 0)]
    md.close()
    assert len(survivors) == 10 and survivors[0][0] == 20  # the last round only
    consumer = KafkaConsumer(bootstrap_servers=agent_proc.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=20_000)
    tp = KTopicPartition("users", 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    assert [(r.offset, r.key, r.value) for _, r in zip(range(10), consumer, strict=False)
            ] == survivors
    consumer.close()


def test_consume_through_a_retained_log_starts_at_the_log_start(
        any_agent: AgentProcess) -> None:
    """Retention removes the expired prefix: a seek below the new log start is
    OFFSET_OUT_OF_RANGE, which the consumer resets to the earliest offset (the log start)."""
    md = any_agent.metadata()
    md.create_topic("logs", 1, {"retention.ms": "3600000"})
    producer = KafkaProducer(bootstrap_servers=any_agent.bootstrap, linger_ms=0)
    old = int(time.time() * 1000) - 2 * 3_600_000  # two hours ago: past retention
    for i in range(20):
        producer.send("logs", key=b"k%d" % i, value=b"old-%d" % i, partition=0, timestamp_ms=old)
    producer.flush(60)  # the old records in their own flushes, before the new ones
    for i in range(20, 30):
        producer.send("logs", key=b"k%d" % i, value=b"new-%d" % i, partition=0)
    producer.flush(60)
    producer.close()
    removed = md.apply_retention()
    start = md.partitions("logs")[0].log_start_offset
    md.close()
    assert [c.topic for c in removed.changes] == ["logs"] and start == 20
    consumer = KafkaConsumer(bootstrap_servers=any_agent.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    tp = KTopicPartition("logs", 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = [(r.offset, r.value) for _, r in zip(range(10), consumer, strict=False)]
    assert got == [(i, b"new-%d" % i) for i in range(20, 30)]
    assert consumer.beginning_offsets([tp]) == {tp: 20}
    consumer.close()


def test_unknown_topic_is_an_error_not_a_creation(agent_proc: AgentProcess) -> None:
    producer = KafkaProducer(bootstrap_servers=agent_proc.bootstrap, enable_idempotence=False,
                             max_block_ms=2_000)
    with pytest.raises(KafkaTimeoutError):
        producer.send("nope", b"v").get(10)
    producer.close()
    md = agent_proc.metadata()
    assert [t.name for t in md.list_topics()] == []
    md.close()


def test_aiokafka_produce_and_consume(any_agent: AgentProcess) -> None:
    import asyncio

    agent_proc = any_agent
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    md = agent_proc.metadata()
    md.create_topic("aio", 2)
    md.close()

    async def roundtrip() -> list[tuple[int, bytes, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=agent_proc.bootstrap, acks="all",
                                    enable_idempotence=False)
        await producer.start()
        try:
            metas = [await producer.send_and_wait("aio", b"v%d" % i, key=b"k%d" % i,
                                                  partition=1) for i in range(5)]
            assert [m.offset for m in metas] == list(range(5))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=agent_proc.bootstrap,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tp = ATopicPartition("aio", 1)
            consumer.assign([tp])
            consumer.seek(tp, 2)
            got = [await asyncio.wait_for(consumer.getone(), 30) for _ in range(3)]
        finally:
            await consumer.stop()
        return [(r.offset, r.key, r.value) for r in got]

    assert asyncio.run(roundtrip()) == [(i, b"k%d" % i, b"v%d" % i) for i in (2, 3, 4)]
