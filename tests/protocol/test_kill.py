"""kill -9 of `silt agent` mid-produce loses no acked record: an ack is sent only after the
object PUT and the metadata commit, so whatever a killed agent acked is read back, at the
offsets it acked, through a new agent on the same store and metadata store."""

from __future__ import annotations

import signal
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from agent import Reader
from objectstore import open_store

from .server import Backend

PARTITIONS = 4


def test_kill_9_mid_produce_loses_no_acked_record(backend: Backend) -> None:
    md = backend.metadata()
    md.create_topic("t", PARTITIONS)
    first = backend.agent("first").start()
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            failed.append(err)

    producer = Producer({"bootstrap.servers": first.bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 5_000, "retries": 0})
    for i in range(3_000):
        producer.produce("t", b"value-%d" % i, b"k%d" % i, partition=i % PARTITIONS,
                         on_delivery=on_delivery)
        producer.poll(0)
        if i == 1_500:
            while len(acked) < 200:  # some acked before the kill, more in flight
                producer.poll(0.05)
            assert first.terminate(signal.SIGKILL) == -signal.SIGKILL
    producer.flush(30)
    assert len(acked) + len(failed) == 3_000 and len(acked) >= 200 and failed

    stored = Reader(open_store(backend.store_url), md)
    on_disk = {(p, r.offset): r.value for p in range(PARTITIONS) for r in stored.read("t", p)}
    assert {k: on_disk.get(k) for k in acked} == acked  # every ack, at its offset

    second = backend.agent("second").start()  # a new agent serves the same log
    try:
        consumer = Consumer({"bootstrap.servers": second.bootstrap, "group.id": "unused",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", p, 0) for p in range(PARTITIONS)])
        seen: dict[tuple[int | None, int | None], bytes | None] = {}
        while len(seen) < len(on_disk):
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None
            seen[(msg.partition(), msg.offset())] = msg.value()
        consumer.close()
        assert seen == on_disk
        after = Producer({"bootstrap.servers": second.bootstrap, "acks": "all"})
        offsets: list[int | None] = []
        after.produce("t", b"after", partition=0,
                      on_delivery=lambda err, msg: offsets.append(msg.offset()))
        after.flush(30)
        assert offsets == [max(o for p, o in on_disk if p == 0) + 1]  # the log goes on
    finally:
        second.terminate()
        md.close()
