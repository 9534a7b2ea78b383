"""Authorization enforced by a real `silt agent` (StandardAuthorizer, User:ANONYMOUS from
127.0.0.1): Produce, Fetch, ListOffsets and Metadata answer Kafka's errors for a topic the
client may not use, nothing is stored or read, hosts count, authorized-operations bitfields
are Kafka's (with and without an authorizer), and an ACL created through one agent opens a
topic on another within a second."""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from kafka.admin import KafkaAdminClient
from kio.schema.describe_cluster.v1 import request as dc1
from kio.schema.describe_groups.v5 import request as dg5
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v10 import request as m10
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i16, i32, i64

import acl
from agent.config import STANDARD_AUTHORIZER
from agent.protocol.apis import TABLE, Api

from .server import AgentProcess, Backend, RawClient
from .test_groups_raw import _ms, build, commit
from .test_raw import batch, fetch, list_offset, produce

AUTHORIZER = {"SILT_AGENT_AUTHORIZER_CLASS_NAME": STANDARD_AUTHORIZER}
ANON = "User:ANONYMOUS"
Op, R = acl.Operation, acl.ResourceType
DENIED = ErrorCode.topic_authorization_failed.value
DENIED_CODE = ErrorCode.topic_authorization_failed
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


# ------------------------------------------------------------------ consumer groups

GDENIED = ErrorCode.group_authorization_failed


def test_group_apis_answer_group_and_topic_authorization_failed(local: Backend) -> None:
    """Group `readers` allows READ and DELETE, `other` nothing; topic `open` everything,
    `closed` nothing: each group API answers as KafkaApis does, and commits nothing denied."""
    setup(local, allow(R.TOPIC, "open", Op.ALL), allow(R.GROUP, "readers", Op.READ),
          allow(R.GROUP, "readers", Op.DELETE))
    proc = local.agent("agent", AUTHORIZER).start()
    client = RawClient(proc.port)
    try:
        call = client.call
        found = call(10, 4, build(10, 4, key_type=i8(0), coordinator_keys=("readers", "other")))
        assert [(c.key, c.error_code) for c in found.coordinators] == [
            ("readers", ErrorCode.none), ("other", GDENIED)]
        joined = call(11, 5, build(11, 5, group_id="other", session_timeout=_ms(10_000),
                                   rebalance_timeout=_ms(10_000), member_id="",
                                   group_instance_id=None, protocol_type="consumer",
                                   protocols=(build(11, 5, "JoinGroupRequestProtocol",
                                                    name="range", metadata=b""),)))
        assert (joined.error_code, joined.generation_id, joined.member_id) == (GDENIED, -1, "")
        assert call(12, 4, build(12, 4, group_id="other", generation_id=i32(1), member_id="m",
                                 group_instance_id=None)).error_code == GDENIED
        assert call(14, 5, build(14, 5, group_id="other", generation_id=i32(1), member_id="m",
                                 group_instance_id=None, protocol_type=None,
                                 protocol_name=None, assignments=())).error_code == GDENIED
        assert call(13, 5, build(13, 5, group_id="other", members=())).error_code == GDENIED
        # OffsetCommit: READ on the group, then on each topic.
        assert commit(client, "other", {("open", 0): 1}) == {("open", 0): GDENIED}
        assert commit(client, "readers", {("open", 0): 1, ("closed", 0): 1}) == {
            ("open", 0): ErrorCode.none, ("closed", 0): ErrorCode.topic_authorization_failed}
        md = local.metadata()
        try:
            assert {(c.topic, c.offset) for c in md.fetch_offsets("readers", None)} == {
                ("open", 1)}
        finally:
            md.close()
        # OffsetFetch: DESCRIBE on the group (READ implies it), then on each topic.
        one = call(9, 7, build(9, 7, group_id="readers", require_stable=False, topics=(
            build(9, 7, "OffsetFetchRequestTopic", name="open", partition_indexes=(i32(0),)),
            build(9, 7, "OffsetFetchRequestTopic", name="closed",
                  partition_indexes=(i32(0),)))))
        assert one.error_code == ErrorCode.none
        assert [(t.name, p.committed_offset, p.error_code) for t in one.topics
                for p in t.partitions] == [
            ("open", 1, ErrorCode.none), ("closed", -1, ErrorCode.topic_authorization_failed)]
        assert call(9, 7, build(9, 7, group_id="other", require_stable=False,
                                topics=None)).error_code == GDENIED
        many = call(9, 8, build(9, 8, require_stable=False, groups=(
            build(9, 8, "OffsetFetchRequestGroup", group_id="readers", topics=None),
            build(9, 8, "OffsetFetchRequestGroup", group_id="other", topics=None))))
        assert [(g.group_id, g.error_code, [t.name for t in g.topics]) for g in many.groups] \
            == [("readers", ErrorCode.none, ["open"]), ("other", GDENIED, [])]
        # OffsetDelete: DELETE on the group, READ on each topic.
        assert call(47, 0, build(47, 0, group_id="other", topics=())).error_code == GDENIED
        deleted = call(47, 0, build(47, 0, group_id="readers", topics=tuple(
            build(47, 0, "OffsetDeleteRequestTopic", name=t, partitions=(
                build(47, 0, "OffsetDeleteRequestPartition", partition_index=i32(0)),))
            for t in ("open", "closed"))))
        assert [(t.name, t.partitions[0].error_code) for t in deleted.topics] == [
            ("open", ErrorCode.none), ("closed", ErrorCode.topic_authorization_failed)]
        # DeleteGroups: DELETE on each, the denied ones after the others (`readers` is
        # looked up: its offsets were just deleted, so it is not found).
        results = call(42, 2, build(42, 2, groups_names=("other", "readers", "other"))).results
        assert [(r.group_id, r.error_code) for r in results] == [
            ("readers", ErrorCode.group_id_not_found), ("other", GDENIED)]
    finally:
        client.close()
        proc.terminate()


def test_list_groups_shows_only_described_groups(local: Backend) -> None:
    setup(local, allow(R.TOPIC, "open", Op.ALL), allow(R.GROUP, "readers", Op.READ))
    proc = local.agent("agent", AUTHORIZER).start()
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "readers",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    client = RawClient(proc.port)
    try:
        consumer.subscribe(["open"])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            consumer.poll(0.2)
            assert time.monotonic() < deadline, "the consumer never joined"

        def listed() -> list[str]:
            return [g.group_id for g in client.call(16, 4, build(
                16, 4, states_filter=())).groups]

        assert listed() == ["readers"]
        md = local.metadata()
        try:  # DENY DESCRIBE on it: gone from the listing within a second
            md.create_acls([acl.Acl(R.GROUP, "readers", acl.PatternType.LITERAL, ANON, "*",
                                    Op.DESCRIBE, acl.Permission.DENY)])
        finally:
            md.close()
        start = time.monotonic()
        while listed():
            assert time.monotonic() - start < 1.0, "DENY not applied within 1 s"
            time.sleep(0.01)
    finally:
        consumer.close()
        client.close()
        proc.terminate()


# ------------------------------------------------------------------ every handler


# APIs a client may call before it is anyone (Kafka authorizes none of them).
UNAUTHORIZED_APIS = {"api_versions", "sasl_handshake", "sasl_authenticate"}


def test_every_handler_asks_the_authorizer() -> None:
    """A handler added to the dispatch table without an authorization check fails here
    (KafkaApis authorizes every API but ApiVersions and SASL)."""
    def checks(api: Api) -> bool:
        source = inspect.getsource(sys.modules[api.handler.__module__])
        return "ctx.authz" in source or "config_refusal(" in source  # configs.py's

    assert [api.name for api in TABLE.values()
            if api.name not in UNAUTHORIZED_APIS and not checks(api)] == []


def test_admin_apis_answer_authorization_failed(local: Backend) -> None:
    """Topic `open` allows everything, `closed` nothing; the cluster nothing: each admin API
    answers Kafka's error for what it may not touch, and changes nothing of it."""
    setup(local, allow(R.TOPIC, "open", Op.ALL), allow(R.TOPIC, "new-ok", Op.CREATE))
    proc = local.agent("agent", AUTHORIZER).start()
    client = RawClient(proc.port)
    admin = KafkaAdminClient(bootstrap_servers=proc.bootstrap)
    call = client.call
    try:
        created = call(19, 7, build(19, 7, timeout=_ms(30_000), validate_only=False, topics=tuple(
            build(19, 7, "CreatableTopic", name=n, num_partitions=i32(1),
                  replication_factor=i16(1), assignments=(), configs=())
            for n in ("new-ok", "new-denied"))))
        assert [(t.name, t.error_code, t.topic_config_error_code) for t in created.topics] == [
            ("new-ok", ErrorCode.none, DENIED), ("new-denied", DENIED_CODE, DENIED)]
        deleted = call(20, 6, build(20, 6, timeout=_ms(30_000), topics=tuple(
            build(20, 6, "DeleteTopicState", name=n, topic_id=None)
            for n in ("closed", "nowhere"))))
        assert [(t.name, t.error_code) for t in deleted.responses] == [
            ("closed", DENIED_CODE), ("nowhere", DENIED_CODE)]
        grown = call(37, 3, build(37, 3, timeout=_ms(30_000), validate_only=False, topics=tuple(
            build(37, 3, "CreatePartitionsTopic", name=n, count=i32(2), assignments=None)
            for n in ("open", "closed"))))
        assert [(r.name, r.error_code) for r in grown.results] == [
            ("open", ErrorCode.none), ("closed", DENIED_CODE)]
        records = call(21, 2, build(21, 2, timeout=_ms(30_000), topics=tuple(
            build(21, 2, "DeleteRecordsTopic", name=n, partitions=(
                build(21, 2, "DeleteRecordsPartition", partition_index=i32(0),
                      offset=i64(0)),)) for n in ("open", "closed"))))
        assert [(t.name, t.partitions[0].error_code) for t in records.topics] == [
            ("open", ErrorCode.none), ("closed", DENIED_CODE)]
        # Configs: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the cluster for a broker.
        described = call(32, 4, build(32, 4, include_synonyms=False,
                                      include_documentation=False, resources=tuple(
            build(32, 4, "DescribeConfigsResource", resource_type=i8(t), resource_name=n,
                  configuration_keys=None)
            for t, n in ((2, "open"), (2, "closed"), (4, ""), (32, "g")))))
        assert [(r.resource_name, r.error_code, bool(r.configs)) for r in described.results] \
            == [("open", ErrorCode.none, True), ("closed", DENIED_CODE, False),
                ("", ErrorCode.cluster_authorization_failed, False),
                ("g", ErrorCode.group_authorization_failed, False)]
        altered = call(44, 1, build(44, 1, validate_only=False, resources=tuple(
            build(44, 1, "AlterConfigsResource", resource_type=i8(2), resource_name=n,
                  configs=(build(44, 1, "AlterableConfig", name="retention.ms",
                                 config_operation=i8(0), value="1000"),))
            for n in ("open", "closed"))))
        assert [(r.resource_name, r.error_code) for r in altered.responses] == [
            ("open", ErrorCode.none), ("closed", DENIED_CODE)]
        md = local.metadata()
        try:
            assert md.get_topic("closed").partitions == 1
            assert "retention.ms" not in md.get_topic("closed").configs
            assert md.get_topic("open").configs["retention.ms"] == "1000"
            assert [t.name for t in md.list_topics()] == ["closed", "new-ok", "open"]
        finally:
            md.close()
        # The cluster's own APIs.
        assert call(35, 4, build(35, 4, topics=None)).error_code == \
            ErrorCode.cluster_authorization_failed
        assert call(46, 0, build(46, 0, timeout=_ms(30_000), topics=None)).error_code == \
            ErrorCode.cluster_authorization_failed
        elected = call(43, 2, build(43, 2, election_type=i8(0), timeout=_ms(30_000),
                                    topic_partitions=(build(43, 2, "TopicPartitions",
                                                            topic="open",
                                                            partitions=(i32(0),)),)))
        assert elected.error_code == ErrorCode.cluster_authorization_failed
        assert elected.replica_election_results[0].partition_result[0].error_code == \
            ErrorCode.cluster_authorization_failed
        producers = call(61, 0, build(61, 0, topics=tuple(
            build(61, 0, "TopicRequest", name=n, partition_indexes=(i32(0),))
            for n in ("open", "closed"))))
        assert [(t.name, t.partitions[0].error_code) for t in producers.topics] == [
            ("open", ErrorCode.none), ("closed", DENIED_CODE)]
        # InitProducerId: WRITE on some topic is enough for an idempotent producer.
        assert call(22, 4, build(22, 4, transactional_id=None, transaction_timeout=_ms(60_000),
                                 producer_id=i64(-1), producer_epoch=i16(-1))
                    ).error_code == ErrorCode.none
        # A listing shows what it may DESCRIBE: not `closed`, nor `new-ok` (CREATE only).
        assert sorted(admin.list_topics()) == ["open"]
    finally:
        admin.close()
        client.close()
        proc.terminate()


def test_idempotent_producer_needs_write_somewhere(local: Backend) -> None:
    setup(local, allow(R.TOPIC, "open", Op.READ))
    proc = local.agent("agent", AUTHORIZER).start()
    client = RawClient(proc.port)
    try:
        assert client.call(22, 4, build(22, 4, transactional_id=None,
                                        transaction_timeout=_ms(60_000), producer_id=i64(-1),
                                        producer_epoch=i16(-1))).error_code == \
            ErrorCode.cluster_authorization_failed
    finally:
        client.close()
        proc.terminate()


def test_transactions_and_quotas_need_their_acls(local: Backend) -> None:
    """A transactional producer without WRITE on its transactional id is refused at
    init_transactions (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal); with it, its records
    commit; the quota APIs need DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster."""
    setup(local, allow(R.TOPIC, "open", Op.ALL), allow(R.TRANSACTIONAL_ID, "tx-ok", Op.WRITE))
    proc = local.agent("agent", AUTHORIZER).start()
    client = RawClient(proc.port)
    try:
        denied = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "tx-no"})
        with pytest.raises(KafkaException) as refused:
            denied.init_transactions(30)
        assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        allowed = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "tx-ok"})
        allowed.init_transactions(30)
        allowed.begin_transaction()
        allowed.produce("open", b"v", partition=0)
        allowed.commit_transaction(30)
        assert next_offset(local, "open") == 2  # the record and its commit marker
        quotas = client.call(48, 1, build(48, 1, components=(), strict=False))
        assert quotas.error_code == ErrorCode.cluster_authorization_failed
    finally:
        client.close()
        proc.terminate()


# ------------------------------------------------------------------ named SCRAM users


def test_scram_users_are_authorized_by_name(local: Backend) -> None:
    """Over SASL_PLAINTEXT with SCRAM-SHA-256, alice (ALLOW WRITE and READ on `t`) produces
    and reads; bob, authenticated but named in no ACL, gets TOPIC_AUTHORIZATION_FAILED and
    stores nothing; a DENY for User:alice from her host then stops her within a second."""
    from agent.sasl.scram import make_credential

    proc = local.agent("agent", {**AUTHORIZER,
                                 "SILT_AGENT_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-256",
                                 "SILT_AGENT_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS": "10",
                                 "SILT_AGENT_LOG_LEVEL": "info"})
    proc.listeners = {"SASL_PLAINTEXT": "SASL_PLAINTEXT"}
    md = local.metadata()
    try:
        md.create_topic("t", 1)
        for user in ("alice", "bob"):
            md.alter_scram_credentials([], [(user, make_credential("SCRAM-SHA-256",
                                                                    f"{user}-pw", 4096))])
        md.create_acls([acl.Acl(R.TOPIC, "t", acl.PatternType.LITERAL, "User:alice", "*", op,
                                acl.Permission.ALLOW) for op in (Op.WRITE, Op.READ)])
    finally:
        md.close()
    proc.start()

    def produce_as(user: str) -> KafkaError | None:
        outcome: list[KafkaError | None] = []
        producer = Producer({"bootstrap.servers": proc.address("SASL_PLAINTEXT"),
                             "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user,
                             "sasl.password": f"{user}-pw", "enable.idempotence": False})
        producer.produce("t", b"v", partition=0, on_delivery=lambda e, m: outcome.append(e))
        assert producer.flush(30) == 0
        return outcome[0]

    try:
        assert produce_as("alice") is None
        denied = produce_as("bob")
        assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert next_offset(local, "t") == 1
        assert "authenticated as User:bob" in proc.log()
        md = local.metadata()
        try:
            md.create_acls([acl.Acl(R.TOPIC, "t", acl.PatternType.LITERAL, "User:alice",
                                    "127.0.0.1", Op.WRITE, acl.Permission.DENY)])
        finally:
            md.close()
        denied_by = time.monotonic() + 1.0  # within a second every agent decides anew
        stored = 1
        while True:  # polled: a produce begun before then may still be taken
            begun = time.monotonic()
            if (stopped := produce_as("alice")) is not None:
                break
            stored += 1
            assert begun < denied_by, "a produce begun a second after the DENY was taken"
        assert stopped.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert next_offset(local, "t") == stored
    finally:
        proc.terminate()
