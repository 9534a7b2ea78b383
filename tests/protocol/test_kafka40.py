"""Kafka 4.0's API surface through a real `silt agent`: the versions clients infer the
broker's release from (kafka-python says 4.0; librdkafka uses its newest), topic ids in Fetch
(v13+), and what the newest versions of ListOffsets, Metadata, FindCoordinator and
DescribeGroups answer."""

from __future__ import annotations

import logging
import re
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as f17
from kio.schema.metadata.v12 import request as m12
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from agent.protocol.apis import (
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    LIST_OFFSETS,
    METADATA,
)

from .server import AgentProcess, RawClient
from .test_groups_raw import build
from .test_raw import batch, produce


@pytest.fixture
def client(agent_proc: AgentProcess) -> Any:
    c = RawClient(agent_proc.port)
    yield c
    c.close()


def topic_ids(client: RawClient, *names: str) -> dict[str, uuid.UUID]:
    """Each topic's id, as Metadata answers it."""
    req = m12.MetadataRequest(topics=tuple(m12.MetadataRequestTopic(name=TopicName(n),
                                                                     topic_id=None)
                                           for n in names),
                              allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    return {str(t.name): t.topic_id for t in client.call(3, 12, req).topics}


def fetch_by_id(client: RawClient, topic_id: uuid.UUID, partition: int, offset: int) -> Any:
    """Fetch v17 of one partition named by its topic's id: the topic response."""
    req = f17.FetchRequest(
        max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1), max_bytes=i32(1 << 20),
        isolation_level=i8(0), topics=(f17.FetchTopic(topic_id=topic_id, partitions=(
            f17.FetchPartition(partition=i32(partition), fetch_offset=i64(offset),
                               partition_max_bytes=i32(1 << 20)),)),),
        forgotten_topics_data=(), rack_id="")
    return client.call(1, 17, req).responses[0]


def test_fetch_names_topics_by_id(agent_proc: AgentProcess, client: RawClient) -> None:
    """Fetch v13+ reads the topic its id names and answers under that id; an id no topic
    has, or one of a topic deleted (even if created again under its name), answers
    UNKNOWN_TOPIC_ID; a partition past the topic's, UNKNOWN_TOPIC_OR_PARTITION."""
    md = agent_proc.metadata()
    md.create_topic("ids", 2)
    assert produce(client, {("ids", 1): batch(3)}) == {("ids", 1): (0, 0)}
    old = topic_ids(client, "ids")["ids"]
    topic = fetch_by_id(client, old, 1, 1)
    [part] = topic.partitions
    assert (topic.topic_id, part.error_code, part.high_watermark) == (old, ErrorCode.none, 3)
    assert part.records and len(part.records) > 0
    unknown = uuid.uuid4()
    topic = fetch_by_id(client, unknown, 0, 0)
    assert (topic.topic_id, topic.partitions[0].error_code) == (unknown,
                                                                ErrorCode.unknown_topic_id)
    assert fetch_by_id(client, old, 7, 0).partitions[0].error_code == (
        ErrorCode.unknown_topic_or_partition)
    md.delete_topic("ids")
    md.create_topic("ids", 2)
    assert produce(client, {("ids", 1): batch(1)}) == {("ids", 1): (0, 0)}
    new = topic_ids(client, "ids")["ids"]
    assert new != old
    assert fetch_by_id(client, old, 1, 0).partitions[0].error_code == ErrorCode.unknown_topic_id
    assert fetch_by_id(client, new, 1, 0).partitions[0].high_watermark == 1
    md.close()


def test_kafka_python_infers_kafka_4_0(agent_proc: AgentProcess) -> None:
    """kafka-python infers the broker's release from its highest API versions (ListOffsets
    v10: 4.0; it said 3.8 while ListOffsets stopped at v7 and Fetch at v12)."""
    admin = KafkaAdminClient(bootstrap_servers=agent_proc.bootstrap)
    try:
        assert admin._client.check_version() == (4, 0)
    finally:
        admin.close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_uses_its_newest_versions(agent_proc: AgentProcess) -> None:
    """librdkafka 2.16 sends its newest Produce, Fetch (v16: topics by id) and Metadata
    (v13) here, and consumes what it produced through them."""
    md = agent_proc.metadata()
    md.create_topic("rd", 1)
    md.close()
    handler = _Lines()
    log = logging.getLogger("test_kafka40.rd")
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    conf = {"bootstrap.servers": agent_proc.bootstrap, "debug": "protocol", "logger": log}
    producer = Producer(conf)
    producer.produce("rd", b"v", b"k", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": "rd", "auto.offset.reset": "earliest"})
    consumer.subscribe(["rd"])
    got = None
    deadline = time.monotonic() + 60
    try:
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got = msg.value()
    finally:
        consumer.close()
    assert got == b"v"
    sent: dict[str, int] = {}
    for line in handler.lines:
        if found := re.search(r"Sent (\w+)Request \(v(\d+)", line):
            sent[found[1]] = max(sent.get(found[1], 0), int(found[2]))
    assert (sent["Produce"], sent["Fetch"], sent["Metadata"]) == (10, 16, 13), sent


def test_newest_versions_answer_as_kafka_4_0(agent_proc: AgentProcess,
                                             client: RawClient) -> None:
    """ListOffsets v10: earliest local (-4) is the log start (nothing is tiered), latest
    tiered (-5) none (-1), as Kafka without remote storage; Metadata v13 has a top-level
    error code; FindCoordinator v6's share key is INVALID_REQUEST (no share coordinator);
    DescribeGroups v6 answers an unknown group GROUP_ID_NOT_FOUND (KIP-1043), v5 Dead."""
    md = agent_proc.metadata()
    md.create_topic("lo", 1)
    md.close()
    assert produce(client, {("lo", 0): batch(4)}) == {("lo", 0): (0, 0)}
    client.call(21, 2, build(21, 2, topics=(build(21, 2, "DeleteRecordsTopic", name="lo",
                partitions=(build(21, 2, "DeleteRecordsPartition", partition_index=i32(0),
                                  offset=i64(1)),)),), timeout=i32Timedelta.parse(
                                      timedelta(seconds=30))))

    def offset(ts: int) -> tuple[int, int]:
        req = build(LIST_OFFSETS, 10, replica_id=i32(-1), isolation_level=i8(0),
                    timeout=i32Timedelta.parse(timedelta(seconds=30)), topics=(
                        build(LIST_OFFSETS, 10, "ListOffsetsTopic", name="lo", partitions=(
                            build(LIST_OFFSETS, 10, "ListOffsetsPartition",
                                  partition_index=i32(0), current_leader_epoch=i32(-1),
                                  timestamp=i64(ts)),)),))
        [p] = client.call(LIST_OFFSETS, 10, req).topics[0].partitions
        return int(p.error_code), int(p.offset)

    assert [offset(ts) for ts in (-2, -4, -5, -1)] == [(0, 1), (0, 1), (0, -1), (0, 4)]

    meta = client.call(METADATA, 13, build(METADATA, 13, topics=None,
                                           allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False))
    assert meta.error_code == ErrorCode.none and [t.name for t in meta.topics] == ["lo"]

    [share] = client.call(FIND_COORDINATOR, 6, build(
        FIND_COORDINATOR, 6, key_type=i8(2), coordinator_keys=("g:t:0",))).coordinators
    assert (share.error_code, share.node_id) == (ErrorCode.invalid_request, -1)
    [group] = client.call(FIND_COORDINATOR, 6, build(
        FIND_COORDINATOR, 6, key_type=i8(0), coordinator_keys=("g",))).coordinators
    assert group.error_code == ErrorCode.none and group.port == agent_proc.port

    def described(version: int) -> Any:
        [g] = client.call(DESCRIBE_GROUPS, version, build(
            DESCRIBE_GROUPS, version, groups=("nobody",),
            include_authorized_operations=False)).groups
        return g

    v6 = described(6)
    assert (v6.error_code, v6.error_message, v6.group_state) == (
        ErrorCode.group_id_not_found, "Group nobody not found.", "")
    v5 = described(5)
    assert (v5.error_code, v5.group_state, v5.members) == (ErrorCode.none, "Dead", ())
