"""Kafka's topic configs through a real `silt agent` with confluent-kafka's AdminClient:
every Kafka 4.0 name accepted (librdkafka tests 0052, 0077, 0081 set message.timestamp.type,
segment.ms, flush.ms), checked as Kafka checks it, described back with its source and
default, and message.timestamp.type=LogAppendTime applied."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource, ConfigSource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from metadata.topicconfig import DEFAULTS, DESCRIPTIONS, IGNORED

from .server import AgentProcess

GIVEN = {"message.timestamp.type": "LogAppendTime", "segment.ms": "100", "flush.ms": "1000",
         "flush.messages": "1", "preallocate": "true", "min.insync.replicas": "2",
         "unclean.leader.election.enable": "true", "segment.bytes": "10000",
         "index.interval.bytes": "1", "retention.ms": "600000"}


def _timestamps(bootstrap: str, topic: str, n: int, acked: list[tuple[int, int]] | None = None
                ) -> list[tuple[int, int]]:
    """The timestamps a consumer reads of `n` records produced with timestamps 1_000_000 + i;
    `acked` gets each delivery report's (librdkafka takes Produce's log_append_time_ms)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    reports = [] if acked is None else acked

    def delivered(_: object, msg: Message[bytes, bytes]) -> None:
        reports.append(msg.timestamp())

    for i in range(n):
        producer.produce(topic, b"v%d" % i, b"k%d" % i, partition=0, timestamp=1_000_000 + i,
                         on_delivery=delivered)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, int]] = []
    try:
        while len(got) < n:
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None, msg and msg.error()
            got.append(msg.timestamp())
    finally:
        consumer.close()
    return got


def test_kafka_topic_configs_accepted_described_and_log_append_time_applied(
        agent_proc: AgentProcess) -> None:
    admin = AdminClient({"bootstrap.servers": agent_proc.bootstrap})
    futures = admin.create_topics([
        NewTopic("stamped", 1, 1, config=GIVEN), NewTopic("created", 1, 1),
        NewTopic("bad", 1, 1, config={"segment.ms": "0"}),
    ])
    futures["stamped"].result(60)
    futures["created"].result(60)
    with pytest.raises(KafkaException) as bad:
        futures["bad"].result(60)
    assert bad.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Invalid value 0 for configuration segment.ms: " in bad.value.args[0].str()

    res = ConfigResource(ResourceType.TOPIC, "stamped")
    entries = admin.describe_configs([res])[res].result(60)
    assert set(entries) == set(DEFAULTS)
    for key, value in GIVEN.items():
        assert (entries[key].value, entries[key].source) == (
            value, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), key
    for key in set(DEFAULTS) - set(GIVEN):
        assert (entries[key].value, entries[key].source) == (
            DEFAULTS[key], ConfigSource.DEFAULT_CONFIG.value), key
    assert "Accepted and ignored here" in DESCRIPTIONS["segment.ms"][1]
    assert "message.timestamp.type" not in IGNORED

    before = int(time.time() * 1000)
    acked: list[tuple[int, int]] = []
    stamped = _timestamps(agent_proc.bootstrap, "stamped", 5, acked)
    after = int(time.time() * 1000)
    assert {kind for kind, _ in stamped} == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(before - 1000 <= ts <= after + 1000 for _, ts in stamped), (before, stamped)
    # Produce's log_append_time_ms is each batch's stamp: what the consumer reads back
    assert sorted(acked) == sorted(stamped), (acked, stamped)
    acked = []
    assert _timestamps(agent_proc.bootstrap, "created", 3, acked) == [
        (TIMESTAMP_CREATE_TIME, 1_000_000 + i) for i in range(3)]
    assert acked == [(TIMESTAMP_CREATE_TIME, 1_000_000 + i) for i in range(3)]
