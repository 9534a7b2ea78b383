"""Kafka 4.0's API surface through a real `silt agent`: topic ids in Fetch (v13+), and the
versions clients infer the broker's release from (kafka-python, librdkafka)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as f17
from kio.schema.metadata.v12 import request as m12
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from .server import AgentProcess, RawClient
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
