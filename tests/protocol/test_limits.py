"""Limits on the work one request may ask of a real `silt agent`: partitions per CreateTopics
and CreatePartitions request (max.partitions.per.request) and per cluster (max.partitions),
checked by validate_only exactly as by a create; topic names as Kafka's Topic.validate
(INVALID_TOPIC_EXCEPTION, the connection kept); a Fetch bounded by fetch.max.bytes and
answering a partition named many times once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import PolicyViolationError
from kio.schema.create_topics.v5 import request as ct5
from kio.schema.describe_configs.v4 import request as dc4
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as f12
from kio.schema.metadata.v1 import request as m1
from kio.schema.metadata.v12 import request as m12
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from .server import AgentProcess, RawClient
from .test_raw import batch, batch_bases, produce

CLUSTER_MAX = 20_000
FETCH_CAP = 4096
LONG_NAME = "x" * 32_767


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[AgentProcess]:
    """An agent whose cluster holds at most CLUSTER_MAX partitions and whose fetch
    responses hold at most FETCH_CAP record bytes."""
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log",
                        {"SILT_METADATA_MAX_PARTITIONS": str(CLUSTER_MAX),
                         "SILT_AGENT_FETCH_MAX_BYTES": str(FETCH_CAP)}).start()
    yield proc
    proc.terminate()


@pytest.fixture
def client(limited: AgentProcess) -> Iterator[RawClient]:
    c = RawClient(limited.port)
    yield c
    c.close()


def create(client: RawClient, topics: list[tuple[str, int]], *, validate_only: bool = False,
           replication_factor: int = 1) -> list[tuple[str, ErrorCode]]:
    req = ct5.CreateTopicsRequest(topics=tuple(
        ct5.CreatableTopic(name=TopicName(name), num_partitions=i32(n),
                           replication_factor=i16(replication_factor), assignments=(),
                           configs=())
        for name, n in topics), validate_only=validate_only)
    return [(t.name, t.error_code) for t in client.call(19, 5, req).topics]


def topic_names(limited: AgentProcess) -> list[str]:
    md = limited.metadata()
    try:
        return [t.name for t in md.list_topics()]
    finally:
        md.close()


@pytest.mark.parametrize("validate_only", [True, False])
def test_create_topics_limits_and_names(limited: AgentProcess, client: RawClient,
                                        validate_only: bool) -> None:
    started = time.perf_counter()
    assert create(client, [("huge", 2**31 - 1)], validate_only=validate_only) == [
        ("huge", ErrorCode.policy_violation)]
    assert time.perf_counter() - started < 5  # refused before anything is allocated
    # 12,000 in one request: every topic refused, as Kafka's controller refuses them
    assert create(client, [("a", 6000), ("b", 6000)], validate_only=validate_only) == [
        ("a", ErrorCode.policy_violation), ("b", ErrorCode.policy_violation)]
    assert create(client, [("z", 0), ("m", -2), ("bad/name", 1), (LONG_NAME[:300], 1),
                           (".", 1), ("ok", 1), ("ok", 1)], validate_only=validate_only) == [
        ("z", ErrorCode.invalid_partitions), ("m", ErrorCode.invalid_partitions),
        ("bad/name", ErrorCode.invalid_topic_exception),
        (LONG_NAME[:300], ErrorCode.invalid_topic_exception),
        (".", ErrorCode.invalid_topic_exception),
        ("ok", ErrorCode.invalid_request), ("ok", ErrorCode.invalid_request)]
    assert create(client, [("rf", 1)], validate_only=validate_only,
                  replication_factor=0) == [("rf", ErrorCode.invalid_replication_factor)]
    assert topic_names(limited) == []
    # the cluster's max.partitions: 2 x 9,000 fit, a third does not
    assert create(client, [("c1", 9000)]) == [("c1", ErrorCode.none)]
    assert create(client, [("c2", 9000)], validate_only=validate_only) == [
        ("c2", ErrorCode.none)]
    if validate_only:
        assert topic_names(limited) == ["c1"]
        return
    assert create(client, [("c3", 9000)], validate_only=True) == [
        ("c3", ErrorCode.policy_violation)]
    assert create(client, [("c3", 9000)]) == [("c3", ErrorCode.policy_violation)]
    assert create(client, [("c.x", 1)]) == [("c.x", ErrorCode.none)]
    assert create(client, [("c_x", 1), ("c1", 1)], validate_only=True) == [
        ("c_x", ErrorCode.invalid_topic_exception),  # collides with c.x
        ("c1", ErrorCode.topic_already_exists)]
    assert topic_names(limited) == ["c.x", "c1", "c2"]


def test_admin_clients_get_policy_violation(limited: AgentProcess) -> None:
    admin = AdminClient({"bootstrap.servers": limited.bootstrap})
    futures = admin.create_topics([NewTopic("many", 10_001, 1)])
    with pytest.raises(KafkaException) as refused:
        futures["many"].result(60)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
    admin.create_topics([NewTopic("grow", 1, 1)])["grow"].result(60)
    grown = admin.create_partitions([NewPartitions("grow", 10_002)])
    with pytest.raises(KafkaException) as refused:
        grown["grow"].result(60)
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION
    kadmin = KafkaAdminClient(bootstrap_servers=limited.bootstrap, request_timeout_ms=30_000)
    try:
        with pytest.raises(PolicyViolationError):
            kadmin.create_topics([KNewTopic("max", 2**31 - 1, 1)])
        with pytest.raises(PolicyViolationError):
            kadmin.create_topics([KNewTopic("max", 2**31 - 1, 1)], validate_only=True)
    finally:
        kadmin.close()
    assert topic_names(limited) == ["grow"]


def test_illegal_names_get_invalid_topic_exception(limited: AgentProcess,
                                                   client: RawClient) -> None:
    md = limited.metadata()
    md.create_topic("t", 1)
    md.close()
    for name in (LONG_NAME, "bad/name", "", ".."):
        v1 = client.call(3, 1, m1.MetadataRequest(topics=(
            m1.MetadataRequestTopic(name=TopicName(name)), m1.MetadataRequestTopic(
                name=TopicName("t")))))
        assert [(t.name, t.error_code) for t in v1.topics] == [
            (name, ErrorCode.invalid_topic_exception), ("t", ErrorCode.none)]
        v12 = client.call(3, 12, m12.MetadataRequest(
            topics=(m12.MetadataRequestTopic(topic_id=None, name=TopicName(name)),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert v12.topics[0].error_code == ErrorCode.invalid_topic_exception
        described = client.call(32, 4, dc4.DescribeConfigsRequest(resources=(
            dc4.DescribeConfigsResource(resource_type=i8(2), resource_name=name,
                                        configuration_keys=None),)))
        assert described.results[0].error_code == ErrorCode.invalid_topic_exception
    # the connection still serves
    assert client.call(3, 1, m1.MetadataRequest(topics=None)).topics[0].name == "t"


def fetch_many(client: RawClient, parts: list[tuple[str, int, int]], max_bytes: int,
               partition_max_bytes: int = 2**31 - 1) -> Any:
    """Fetch v12 of (topic, partition, offset) entries, each its own topic entry."""
    req = f12.FetchRequest(
        max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1), max_bytes=i32(max_bytes),
        isolation_level=i8(0), topics=tuple(
            f12.FetchTopic(topic=TopicName(topic), partitions=(f12.FetchPartition(
                partition=i32(p), fetch_offset=i64(offset),
                partition_max_bytes=i32(partition_max_bytes)),))
            for topic, p, offset in parts),
        forgotten_topics_data=())
    return client.call(1, 12, req)


def rss_kib(proc: AgentProcess) -> int:
    assert proc.proc is not None
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_fetch_is_bounded_and_answers_a_partition_once(limited: AgentProcess,
                                                       client: RawClient) -> None:
    md = limited.metadata()
    md.create_topic("t", 2)
    md.close()
    one = batch(3, size=400)  # ~1,300 bytes: three fit in FETCH_CAP, four do not
    for _ in range(4):
        assert produce(client, {("t", 0): one, ("t", 1): one})[("t", 0)][0] == ErrorCode.none
    # max_bytes 2^31-1 is cut to fetch.max.bytes, across partitions
    resp = fetch_many(client, [("t", 0, 0), ("t", 1, 0)], 2**31 - 1)
    sizes = [len(p.records) for t in resp.responses for p in t.partitions]
    assert sum(sizes) <= FETCH_CAP and len(batch_bases(resp.responses[0].partitions[0].records
                                                       )) == 3
    # KIP-74: the first batch is returned even when larger than the limits
    first = fetch_many(client, [("t", 0, 0)], 10, partition_max_bytes=10)
    assert batch_bases(first.responses[0].partitions[0].records) == [(0, -1)]
    # 5,000 entries of one partition: answered once, from the last entry's offset
    before = rss_kib(limited)
    many = fetch_many(client, [("t", 0, 0)] * 4_999 + [("t", 0, 6)], 2**31 - 1)
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in many.responses] == [
        ("t", [0])]
    assert batch_bases(many.responses[0].partitions[0].records) == [(6, -1), (9, -1)]
    assert rss_kib(limited) - before < 20 * 1024
