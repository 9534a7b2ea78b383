"""Authorization enforced by a real `silt agent` (StandardAuthorizer, User:ANONYMOUS from
127.0.0.1): Produce, Fetch, ListOffsets and Metadata answer Kafka's errors for a topic the
client may not use, nothing is stored or read, hosts count, authorized-operations bitfields
are Kafka's (with and without an authorizer), and an ACL created through one agent opens a
topic on another within a second."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from kio.schema.describe_cluster.v1 import request as dc1
from kio.schema.describe_groups.v5 import request as dg5
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v10 import request as m10
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8

import acl
from agent.config import STANDARD_AUTHORIZER

from .server import AgentProcess, Backend, RawClient
from .test_raw import batch, fetch, list_offset, produce

AUTHORIZER = {"SILT_AGENT_AUTHORIZER_CLASS_NAME": STANDARD_AUTHORIZER}
ANON = "User:ANONYMOUS"
Op, R = acl.Operation, acl.ResourceType
DENIED = ErrorCode.topic_authorization_failed.value
# Kafka's bitfields of every operation of a type (AclEntry.supportedOperations).
EVERY_TOPIC_OP = acl.bitfield(acl.SUPPORTED[R.TOPIC])
EVERY_CLUSTER_OP = acl.bitfield(acl.SUPPORTED[R.CLUSTER])


def allow(rtype: acl.ResourceType, name: str, op: acl.Operation, host: str = "*",
          pattern: acl.PatternType = acl.PatternType.LITERAL) -> acl.Acl:
    return acl.Acl(rtype, name, pattern, ANON, host, op, acl.Permission.ALLOW)


def setup(backend: Backend, *acls: acl.Acl, topics: tuple[str, ...] = ("open", "closed")
          ) -> None:
    md = backend.metadata()
    try:
        for topic in topics:
            md.create_topic(topic, 1)
        md.create_acls(list(acls))
    finally:
        md.close()


def next_offset(backend: Backend, topic: str) -> int:
    md = backend.metadata()
    try:
        return md.partitions(topic)[0].next_offset
    finally:
        md.close()


@pytest.fixture
def local(tmp_path: Path) -> Backend:
    return Backend(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db", tmp_path)


@pytest.fixture
def secured(local: Backend) -> Iterator[AgentProcess]:
    """An agent with the authorizer: topic `open` allows User:ANONYMOUS everything (a
    PREFIXED `op` ACL), `closed` and `far` nothing (`far` only from another host)."""
    setup(local, allow(R.TOPIC, "op", Op.ALL, pattern=acl.PatternType.PREFIXED),
          allow(R.TOPIC, "far", Op.ALL, host="10.9.9.9"), allow(R.GROUP, "readers", Op.READ),
          topics=("open", "closed", "far"))
    proc = local.agent("agent", AUTHORIZER).start()
    yield proc
    proc.terminate()


def metadata(client: RawClient, topics: list[str] | None, *, ops: bool = False) -> Any:
    return client.call(3, 10, m10.MetadataRequest(
        topics=None if topics is None else tuple(
            m10.MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=True, include_cluster_authorized_operations=ops,
        include_topic_authorized_operations=ops))


def test_raw_apis_answer_topic_authorization_failed(local: Backend,
                                                     secured: AgentProcess) -> None:
    client = RawClient(secured.port)
    try:
        assert produce(client, {("open", 0): batch(2), ("closed", 0): batch(2),
                                ("far", 0): batch(2), ("nowhere", 0): batch(1)}) == {
            ("open", 0): (0, 0), ("closed", 0): (DENIED, -1), ("far", 0): (DENIED, -1),
            ("nowhere", 0): (DENIED, -1)}  # denied before its existence is checked
        assert next_offset(local, "closed") == 0 and next_offset(local, "far") == 0
        opened = fetch(client, "open", 0, 0)
        assert (opened.error_code, len(opened.records or b"")) == (ErrorCode.none,
                                                                   len(batch(2)))
        closed = fetch(client, "closed", 0, 0)
        assert closed.error_code == ErrorCode.topic_authorization_failed
        assert not closed.records
        assert list_offset(client, "open", 0, -1)[:2] == (0, 2)
        assert list_offset(client, "closed", 0, -1) == (DENIED, -1, -1)
        # Metadata: named topics not described are TOPIC_AUTHORIZATION_FAILED without an id
        # (a missing one too: its existence is not disclosed, it is not auto-created);
        # a listing of all topics leaves them out.
        named = {t.name: t for t in metadata(client, ["open", "closed", "nowhere"]).topics}
        assert named["open"].error_code == ErrorCode.none and named["open"].partitions
        for name in ("closed", "nowhere"):
            assert named[name].error_code == ErrorCode.topic_authorization_failed
            assert not named[name].partitions
            assert named[name].topic_id is None  # the zero UUID
        assert [t.name for t in metadata(client, None).topics] == ["open"]
    finally:
        client.close()


def test_authorized_operations(local: Backend, secured: AgentProcess) -> None:
    """Metadata v10 and DescribeCluster compute Kafka's bitfields: every topic operation on
    `open` (ALL), none on `closed`, 0 for the cluster without DESCRIBE on it."""
    client = RawClient(secured.port)
    try:
        response = metadata(client, ["open", "closed"], ops=True)
        ops = {t.name: int(t.topic_authorized_operations) for t in response.topics}
        assert ops == {"open": EVERY_TOPIC_OP, "closed": 0}
        assert int(response.cluster_authorized_operations) == 0
        assert int(metadata(client, ["open"]).topics[0].topic_authorized_operations) == -2**31
        described = client.call(60, 1, dc1.DescribeClusterRequest(
            include_cluster_authorized_operations=True, endpoint_type=i8(1)))
        assert int(described.cluster_authorized_operations) == 0
        groups = client.call(15, 5, dg5.DescribeGroupsRequest(
            groups=(GroupId("g"),), include_authorized_operations=True)).groups
        assert [(g.group_id, g.error_code) for g in groups] == [
            ("g", ErrorCode.group_authorization_failed)]
    finally:
        client.close()


def test_without_an_authorizer_every_operation_is_authorized(agent_proc: AgentProcess
                                                             ) -> None:
    """librdkafka's 0081 ("expected 8, got 0"): with no authorizer Kafka reports every
    operation of the type."""
    md = agent_proc.metadata()
    md.create_topic("t", 1)
    md.close()
    client = RawClient(agent_proc.port)
    try:
        response = metadata(client, ["t"], ops=True)
        assert int(response.topics[0].topic_authorized_operations) == EVERY_TOPIC_OP
        assert bin(EVERY_TOPIC_OP).count("1") == 8
        assert int(response.cluster_authorized_operations) == EVERY_CLUSTER_OP
        described = client.call(60, 1, dc1.DescribeClusterRequest(
            include_cluster_authorized_operations=True, endpoint_type=i8(1)))
        assert int(described.cluster_authorized_operations) == EVERY_CLUSTER_OP
        described = client.call(60, 1, dc1.DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=i8(1)))
        assert int(described.cluster_authorized_operations) == -2**31
    finally:
        client.close()


def test_real_clients_get_topic_authorization_failed(local: Backend,
                                                     secured: AgentProcess) -> None:
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": secured.bootstrap, "linger.ms": 5})
    producer.produce("closed", b"v", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.produce("open", b"v", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0
    assert sorted(str(e.name()) if e else "ok" for e in errors) == [
        "TOPIC_AUTHORIZATION_FAILED", "ok"]
    assert next_offset(local, "closed") == 0
    consumer = Consumer({"bootstrap.servers": secured.bootstrap, "group.id": "readers",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["closed"])
        deadline = time.monotonic() + 30
        while True:
            msg = consumer.poll(1)
            assert time.monotonic() < deadline, "no error reached the consumer"
            if msg is not None:
                error = msg.error()
                assert error is not None, "a record was read from a closed topic"
                assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
                break
    finally:
        consumer.close()


def test_an_acl_created_on_one_agent_opens_the_topic_on_another(local: Backend) -> None:
    setup(local, allow(R.CLUSTER, acl.CLUSTER_NAME, Op.ALTER), topics=("later",))
    one, other = (local.agent(f"agent{i}", AUTHORIZER).start() for i in (0, 1))
    client = RawClient(other.port)
    try:
        assert produce(client, {("later", 0): batch(1)}) == {("later", 0): (DENIED, -1)}
        admin = AdminClient({"bootstrap.servers": one.bootstrap})
        write = AclBinding(ResourceType.TOPIC, "later", ResourcePatternType.LITERAL, ANON,
                           "127.0.0.1", AclOperation.WRITE, AclPermissionType.ALLOW)
        admin.create_acls([write])[write].result(30)
        start = time.monotonic()
        while produce(client, {("later", 0): batch(1)})[("later", 0)][0] == DENIED:
            assert time.monotonic() - start < 1.0, "not applied by the other agent within 1 s"
            time.sleep(0.01)
        assert next_offset(local, "later") == 1
    finally:
        client.close()
        one.terminate()
        other.terminate()
