"""Every compression codec through every client over the wire: confluent-kafka, kafka-python
and aiokafka each produce with gzip, snappy, lz4 and zstd to a real `silt agent` (one
partition per client and codec), the agent stores the batches as sent (compressed with that
codec), and each client consumes all of them back, keys and values intact."""

from __future__ import annotations

import asyncio
import itertools

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from fileformat.batch import iter_batches
from fileformat.compression import WRITABLE_COMPRESSIONS
from objectstore import open_store

from .server import AgentProcess

TOPIC = "codecs"
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")
CODECS = ("gzip", "snappy", "lz4", "zstd")
PAIRS = list(itertools.product(CLIENTS, CODECS))  # partition i is PAIRS[i]
RECORDS = 30  # per partition, produced together so that they share compressed batches

Row = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


def _records(partition: int) -> list[tuple[bytes, bytes]]:
    client, codec = PAIRS[partition]
    return [(f"{client}/{codec}/{i}".encode(), f"{codec} value {i} ".encode() * 20)
            for i in range(RECORDS)]


def _expected() -> list[Row]:
    return [(p, o, k, v) for p in range(len(PAIRS)) for o, (k, v) in enumerate(_records(p))]


def _produce_confluent(bootstrap: str, partition: int, codec: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "compression.type": codec, "linger.ms": 100})
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _: Message) -> None:
        if err is not None:
            errors.append(err)

    for key, value in _records(partition):
        producer.produce(TOPIC, value, key, partition=partition, on_delivery=delivered)
    assert producer.flush(60) == 0 and errors == []


def _produce_kafka_python(bootstrap: str, partition: int, codec: str) -> None:
    # Idempotent (kafka-python 3's default) and compressed.
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type=codec,
                             linger_ms=100)
    futures = [producer.send(TOPIC, key=key, value=value, partition=partition)
               for key, value in _records(partition)]
    producer.flush(60)
    assert [f.get(60).offset for f in futures] == list(range(RECORDS))
    producer.close()


def _produce_aiokafka(bootstrap: str, partition: int, codec: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    compression_type=codec, linger_ms=100)
        await producer.start()
        try:
            sent = [await producer.send(TOPIC, value, key=key, partition=partition)
                    for key, value in _records(partition)]
            offsets = [(await fut).offset for fut in sent]
        finally:
            await producer.stop()
        assert offsets == list(range(RECORDS))

    asyncio.run(produce())


def _consume_confluent(bootstrap: str) -> list[Row]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(len(PAIRS))])
    got: list[Row] = []
    try:
        while len(got) < len(PAIRS) * RECORDS:
            msg = consumer.poll(30)
            assert msg is not None, f"no record after {len(got)}"
            assert msg.error() is None, msg.error()
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            got.append((partition, offset, msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def _consume_kafka_python(bootstrap: str) -> list[Row]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=20_000)
    consumer.assign([KTopicPartition(TOPIC, p) for p in range(len(PAIRS))])
    consumer.seek_to_beginning()
    got = [(r.partition, r.offset, r.key, r.value)
           for _, r in zip(range(len(PAIRS) * RECORDS), consumer, strict=False)]
    consumer.close()
    return got


def _consume_aiokafka(bootstrap: str) -> list[Row]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    async def consume() -> list[Row]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        got: list[Row] = []
        try:
            consumer.assign([ATopicPartition(TOPIC, p) for p in range(len(PAIRS))])
            await consumer.seek_to_beginning()
            while len(got) < len(PAIRS) * RECORDS:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                got += [(r.partition, r.offset, r.key, r.value)
                        for records in batches.values() for r in records]
        finally:
            await consumer.stop()
        return got

    return asyncio.run(consume())


PRODUCE = {"confluent-kafka": _produce_confluent, "kafka-python": _produce_kafka_python,
           "aiokafka": _produce_aiokafka}
CONSUME = {"confluent-kafka": _consume_confluent, "kafka-python": _consume_kafka_python,
           "aiokafka": _consume_aiokafka}


def test_every_codec_through_every_client(any_agent: AgentProcess) -> None:
    agent_proc = any_agent
    md = agent_proc.metadata()
    md.create_topic(TOPIC, len(PAIRS))
    for partition, (client, codec) in enumerate(PAIRS):
        PRODUCE[client](agent_proc.bootstrap, partition, codec)

    # Stored as sent: every batch of a partition carries its producer's codec.
    store = open_store(agent_proc.store_url)
    for partition, (client, codec) in enumerate(PAIRS):
        codecs = {header.compression
                  for seg in md.find_segments(TOPIC, partition, 0)
                  for header, _ in iter_batches(store.get_range(
                      seg.object_key, seg.data_pos, seg.data_pos + seg.data_len))}
        assert codecs == {WRITABLE_COMPRESSIONS[codec]}, (client, codec)
    md.close()

    expected = _expected()
    for client, consume in CONSUME.items():
        assert sorted(consume(agent_proc.bootstrap)) == expected, client
