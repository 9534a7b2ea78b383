"""Admin through Kafka clients: CreateTopics with configs validated as `silt topics`,
DeleteTopics, CreatePartitions, DescribeConfigs, IncrementalAlterConfigs, DeleteRecords,
and auto.create.topics.enable."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic
from kafka import KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kio.schema.create_partitions.v3 import request as cp3
from kio.schema.create_topics.v5 import request as ct5
from kio.schema.delete_topics.v6 import request as dt6
from kio.schema.describe_configs.v4 import request as dc4
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as m12
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from metadata.errors import UnknownTopicError
from metadata.topicconfig import DEFAULTS

from .server import AgentProcess, RawClient
from .test_raw import batch, produce


def test_create_topics_with_confluent_admin(agent_proc: AgentProcess) -> None:
    admin = AdminClient({"bootstrap.servers": agent_proc.bootstrap})
    futures = admin.create_topics([
        NewTopic("users", 3, 1, config={"cleanup.policy": "compact"}),
        NewTopic("bad", 1, 1, config={"cleanup.policy": "sometimes"}),
        NewTopic("only-checked", 2, 1),
    ], validate_only=False)
    assert futures["users"].result(60) is None
    with pytest.raises(KafkaException) as bad:
        futures["bad"].result(60)
    assert "cleanup.policy" in str(bad.value)
    futures["only-checked"].result(60)
    checked = admin.create_topics([NewTopic("dry", 2, 1)], validate_only=True)
    checked["dry"].result(60)
    md = agent_proc.metadata()
    users = md.get_topic("users")
    assert (users.partitions, users.config.compacted) == (3, True)
    assert sorted(t.name for t in md.list_topics()) == ["only-checked", "users"]
    md.close()


def test_create_topics_with_kafka_python_admin(agent_proc: AgentProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=agent_proc.bootstrap)
    admin.create_topics([KNewTopic("events", 4, 1, topic_configs={"retention.ms": "60000"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([KNewTopic("events", 4, 1)])
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics([KNewTopic("x", 1, 1, topic_configs={"retention.ms": "soon"})])
    admin.close()
    md = agent_proc.metadata()
    events = md.get_topic("events")
    assert (events.partitions, events.config.retention_ms) == (4, 60_000)
    md.close()


# ---------------------------------------------------------------- the other admin APIs


def _produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False,
                         "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), f"k{i}".encode(), partition=partition)
    assert producer.flush(60) == 0


def _first_offset(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """The first offset a consumer assigned at `offset` gets (auto.offset.reset=earliest)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, offset)])
    try:
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None, msg and msg.error()
        got = msg.offset()
        assert got is not None
        return got
    finally:
        consumer.close()


def test_confluent_admin_configs_partitions_records_and_delete(any_agent: AgentProcess) -> None:
    md = any_agent.metadata()
    md.create_topic("t", 2, {"retention.ms": "600000"})
    _produce(any_agent.bootstrap, "t", 0, 10)
    admin = AdminClient({"bootstrap.servers": any_agent.bootstrap})

    # DescribeConfigs: every topic config, with its source.
    res = ConfigResource(ResourceType.TOPIC, "t")
    entries = admin.describe_configs([res])[res].result(60)
    assert set(entries) == set(DEFAULTS)
    assert entries["retention.ms"].value == "600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    missing = ConfigResource(ResourceType.TOPIC, "nope")
    with pytest.raises(KafkaException) as unknown:
        admin.describe_configs([missing])[missing].result(60)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # IncrementalAlterConfigs: APPEND to a list config, DELETE an override; bad input.
    # t holds records written without key hashes: compaction is refused (INVALID_CONFIG).
    md.create_topic("fresh", 1, {"retention.ms": "600000"})
    changes = [ConfigEntry("cleanup.policy", "compact",
                           incremental_operation=AlterConfigOpType.APPEND),
               ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)]
    unhashed = ConfigResource(ResourceType.TOPIC, "t", incremental_configs=changes)
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([unhashed])[unhashed].result(60)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "'compact'" in refused.value.args[0].str()
    assert md.get_topic("t").configs == {"retention.ms": "600000"}
    alter = ConfigResource(ResourceType.TOPIC, "fresh", incremental_configs=changes)
    admin.incremental_alter_configs([alter])[alter].result(60)
    fresh = md.get_topic("fresh")
    assert dict(fresh.configs) == {"cleanup.policy": "compact,delete"}
    assert fresh.config.compacted  # what the compactor plans from
    alter = ConfigResource(ResourceType.TOPIC, "t", incremental_configs=changes[1:])
    admin.incremental_alter_configs([alter])[alter].result(60)
    topic = md.get_topic("t")
    assert dict(topic.configs) == {}
    for bad in (ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("segment.bytes", "1", incremental_operation=AlterConfigOpType.APPEND)):
        res_bad = ConfigResource(ResourceType.TOPIC, "t", incremental_configs=[bad])
        with pytest.raises(KafkaException) as invalid:
            admin.incremental_alter_configs([res_bad])[res_bad].result(60)
        assert invalid.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert bad.name in invalid.value.args[0].str()
    dry = ConfigResource(ResourceType.TOPIC, "t", incremental_configs=[
        ConfigEntry("max.message.bytes", "100", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([dry], validate_only=True)[dry].result(60)
    assert md.get_topic("t") == topic
    node = str(md.live_brokers()[0].node_id)
    broker = ConfigResource(ResourceType.BROKER, node)
    broker_alter = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
        ConfigEntry("agent.linger.ms", "5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as static:
        admin.incremental_alter_configs([broker_alter])[broker_alter].result(60)
    assert static.value.args[0].code() == KafkaError.INVALID_REQUEST
    settings = admin.describe_configs([broker])[broker].result(60)
    assert settings["agent.linger.ms"].value == "50"  # AgentProcess sets it in the env
    assert settings["agent.linger.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert settings["agent.flush.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert settings["agent.linger.ms"].is_read_only
    # Kafka's broker names where a setting means the same, the setting its synonym; the
    # topic configs' cluster defaults under Kafka's broker names.
    assert "agent.auto.create.topics.enable" not in settings
    auto = settings["auto.create.topics.enable"]
    assert (auto.value, auto.source, auto.is_read_only) == (
        "false", ConfigSource.DEFAULT_CONFIG.value, True)
    assert [(n, e.value) for n, e in auto.synonyms.items()] == [
        ("auto.create.topics.enable", "false"), ("agent.auto.create.topics.enable", "false")]
    assert settings["num.partitions"].value == "1"
    assert settings["advertised.listeners"].synonyms.keys() >= {"agent.advertised.listeners"}
    # SASL's broker settings too (librdkafka's 0142 reads connections.max.reauth.ms).
    reauth = settings["connections.max.reauth.ms"]
    assert (reauth.value, list(reauth.synonyms)) == (
        "0", ["connections.max.reauth.ms", "agent.connections.max.reauth.ms"])
    assert settings["sasl.enabled.mechanisms"].value == "SCRAM-SHA-256,SCRAM-SHA-512"
    assert (settings["log.retention.ms"].value, settings["message.max.bytes"].value) == (
        "604800000", "1048588")
    assert settings["metadata.url"].is_sensitive and settings["metadata.url"].value is None

    # CreatePartitions: grows only; the new partitions take records at once.
    admin.create_partitions([NewPartitions("t", 4)])["t"].result(60)
    assert md.get_topic("t").partitions == 4
    _produce(any_agent.bootstrap, "t", 3, 2)
    with pytest.raises(KafkaException) as shrink:
        admin.create_partitions([NewPartitions("t", 3)])["t"].result(60)
    assert shrink.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    admin.create_partitions([NewPartitions("t", 9)], validate_only=True)["t"].result(60)
    assert md.get_topic("t").partitions == 4

    # DeleteRecords: the log start moves; earliest is the new start; a consumer below it
    # is reset; above the high watermark is OFFSET_OUT_OF_RANGE and changes nothing.
    done = admin.delete_records([TopicPartition("t", 0, 4)])
    assert done[TopicPartition("t", 0)].result(60).low_watermark == 4
    assert md.partitions("t")[0].log_start_offset == 4
    consumer = Consumer({"bootstrap.servers": any_agent.bootstrap, "group.id": "unused"})
    assert consumer.get_watermark_offsets(TopicPartition("t", 0), timeout=30) == (4, 10)
    consumer.close()
    assert _first_offset(any_agent.bootstrap, "t", 0, 1) == 4
    past = admin.delete_records([TopicPartition("t", 0, 11)])
    with pytest.raises(KafkaException) as out_of_range:
        past[TopicPartition("t", 0)].result(60)
    assert out_of_range.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert md.partitions("t")[0].log_start_offset == 4
    md.create_topic("keyed", 1, {"cleanup.policy": "compact"})  # without delete: refused
    kept = admin.delete_records([TopicPartition("keyed", 0, 0)])
    with pytest.raises(KafkaException) as policy:
        kept[TopicPartition("keyed", 0)].result(60)
    assert policy.value.args[0].code() == KafkaError.POLICY_VIOLATION

    # DeleteTopics: gone; a produce then gets UNKNOWN_TOPIC_OR_PARTITION.
    admin.delete_topics(["t"])["t"].result(60)
    with pytest.raises(UnknownTopicError):
        md.get_topic("t")
    with pytest.raises(KafkaException) as twice:
        admin.delete_topics(["t"])["t"].result(60)
    assert twice.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    client = RawClient(any_agent.port)
    assert produce(client, {("t", 0): batch(1)}) == {
        ("t", 0): (ErrorCode.unknown_topic_or_partition.value, -1)}
    client.close()
    md.close()


def test_kafka_python_admin_describe_alter_grow_delete(agent_proc: AgentProcess) -> None:
    md = agent_proc.metadata()
    md.create_topic("k", 1)
    md.create_topic("other", 1)
    _produce(agent_proc.bootstrap, "k", 0, 6)
    admin = KafkaAdminClient(bootstrap_servers=agent_proc.bootstrap)
    admin.alter_configs([KConfigResource(  # (k holds records without key hashes)
        "TOPIC", "other", configs={"cleanup.policy": ("APPEND", "compact")})])
    assert md.get_topic("other").configs == {"cleanup.policy": "compact,delete"}
    described = admin.describe_configs([KConfigResource("TOPIC", "other")],
                                       include_synonyms=True, config_filter="all")
    text = str(described)
    assert "cleanup.policy" in text and "compact,delete" in text and "retention.ms" in text
    admin.create_partitions({"k": 3})
    assert md.get_topic("k").partitions == 3
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({"k": 2})
    admin.delete_records({KTopicPartition("k", 0): 5})
    assert md.partitions("k")[0].log_start_offset == 5
    admin.delete_topics(["k"])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["k"])
    admin.close()
    assert [t.name for t in md.list_topics()] == ["other"]
    md.close()


def test_delete_topic_by_id_and_recreate_is_a_new_topic(agent_proc: AgentProcess) -> None:
    md = agent_proc.metadata()
    md.create_topic("r", 1)
    client = RawClient(agent_proc.port)
    first = _topic_id(client, "r")
    assert _delete_by_id(client, uuid.uuid4()) == ErrorCode.unknown_topic_id.value
    assert _delete_by_id(client, first) == ErrorCode.none.value
    with pytest.raises(UnknownTopicError):
        md.get_topic("r")
    md.create_topic("r", 1)
    assert _topic_id(client, "r") != first
    client.close()
    md.close()


def _topic_id(client: RawClient, name: str) -> uuid.UUID:
    req = m12.MetadataRequest(topics=(m12.MetadataRequestTopic(topic_id=None, name=TopicName(
        name)),), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    topic_id: uuid.UUID = client.call(3, 12, req).topics[0].topic_id
    return topic_id


def _delete_by_id(client: RawClient, topic_id: uuid.UUID) -> int:
    req = dt6.DeleteTopicsRequest(topics=(dt6.DeleteTopicState(name=None, topic_id=topic_id),),
                                  timeout=i32Timedelta.parse(timedelta(seconds=30)))
    return int(client.call(20, 6, req).responses[0].error_code)


def test_auto_create_topics(tmp_path: Path) -> None:
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log", {"SILT_AGENT_AUTO_CREATE_TOPICS_ENABLE": "true",
                                                 "SILT_AGENT_NUM_PARTITIONS": "3"}).start()
    try:
        client = RawClient(proc.port)
        req = m12.MetadataRequest(topics=(
            m12.MetadataRequestTopic(topic_id=None, name=TopicName("fresh")),
            m12.MetadataRequestTopic(topic_id=None, name=TopicName("bad name!")),
            m12.MetadataRequestTopic(topic_id=None, name=TopicName("not-allowed"))),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False)
        first = {t.name: (int(t.error_code), len(t.partitions))
                 for t in client.call(3, 12, req).topics}
        assert first == {"fresh": (ErrorCode.leader_not_available.value, 0),
                         "bad name!": (ErrorCode.invalid_topic_exception.value, 0),
                         "not-allowed": (ErrorCode.leader_not_available.value, 0)}
        again = {t.name: (int(t.error_code), len(t.partitions))
                 for t in client.call(3, 12, req).topics}
        assert again["fresh"] == (ErrorCode.none.value, 3)
        disallowed = m12.MetadataRequest(topics=(
            m12.MetadataRequestTopic(topic_id=None, name=TopicName("nope")),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        assert int(client.call(3, 12, disallowed).topics[0].error_code) == \
            ErrorCode.unknown_topic_or_partition.value
        client.close()
        # A producer's first send creates the topic.
        producer = KafkaProducer(bootstrap_servers=proc.bootstrap, enable_idempotence=False)
        producer.send("by-producer", b"v", partition=0).get(30)
        producer.close()
        md = proc.metadata()
        assert md.get_topic("by-producer").partitions == 3
        assert sorted(t.name for t in md.list_topics()) == [
            "by-producer", "fresh", "not-allowed"]
        md.close()
    finally:
        proc.terminate()


def test_explicit_replica_assignments(agent_proc: AgentProcess) -> None:
    """librdkafka's 0081: CreateTopics and CreatePartitions with replica assignments naming
    live agents are accepted (placement ignored); bad ones get Kafka's codes and words
    (ReplicationControlManager.createTopic / createPartitions)."""
    admin = AdminClient({"bootstrap.servers": agent_proc.bootstrap})
    cluster = admin.list_topics(timeout=30)
    me = next(iter(cluster.brokers))
    futures = admin.create_topics([NewTopic("placed", 2, replica_assignment=[[me], [me]])])
    futures["placed"].result(60)
    assert len(admin.list_topics("placed", timeout=30).topics["placed"].partitions) == 2
    grown = admin.create_partitions([NewPartitions("placed", 4,
                                                   replica_assignment=[[me], [me]])])
    grown["placed"].result(60)
    assert len(admin.list_topics("placed", timeout=30).topics["placed"].partitions) == 4

    def a(index: int, *brokers: int) -> ct5.CreatableReplicaAssignment:
        return ct5.CreatableReplicaAssignment(partition_index=i32(index),
                                              broker_ids=tuple(BrokerId(b) for b in brokers))

    def topic(name: str, assignments: tuple[ct5.CreatableReplicaAssignment, ...],
              partitions: int = -1, replication: int = -1) -> ct5.CreatableTopic:
        return ct5.CreatableTopic(name=TopicName(name), num_partitions=i32(partitions),
                                  replication_factor=i16(replication),
                                  assignments=assignments, configs=())

    bad = [
        (topic("t1", (a(0, me),), replication=1), ErrorCode.invalid_request,
         "A manual partition assignment was specified, but replication factor was not set"
         " to -1."),
        (topic("t2", (a(0, me),), partitions=1), ErrorCode.invalid_request,
         "A manual partition assignment was specified, but numPartitions was not set to -1."),
        (topic("t3", (a(0, me), a(0, me))), ErrorCode.invalid_replica_assignment,
         "Found multiple manual partition assignments for partition 0"),
        (topic("t4", (a(0),)), ErrorCode.invalid_replica_assignment,
         "The manual partition assignment includes an empty replica list."),
        (topic("t5", (a(0, me, 77),)), ErrorCode.invalid_replica_assignment,
         "The manual partition assignment includes broker 77, but no such broker is"
         " registered."),
        (topic("t6", (a(0, me, me),)), ErrorCode.invalid_replica_assignment,
         f"The manual partition assignment includes the broker {me} more than once."),
        (topic("t7", (a(0, me), a(1))), ErrorCode.invalid_replica_assignment,
         "The manual partition assignment includes an empty replica list."),
        (topic("t8", (a(0, me), a(2, me))), ErrorCode.invalid_replica_assignment,
         "partitions should be a consecutive 0-based integer sequence"),
        (topic("ok", (a(1, me), a(0, me))), ErrorCode.none, None),
    ]
    client = RawClient(agent_proc.port)
    try:
        got = client.call(19, 5, ct5.CreateTopicsRequest(
            topics=tuple(t for t, _, _ in bad), timeout=i32Timedelta.parse(timedelta(seconds=30)),
            validate_only=True)).topics
        assert [(r.name, r.error_code, r.error_message) for r in got] == [
            (t.name, code, message) for t, code, message in bad]
        assert got[-1].num_partitions == -1  # validate_only: no topic to describe
        grow = client.call(37, 3, cp3.CreatePartitionsRequest(topics=(
            cp3.CreatePartitionsTopic(name=TopicName("placed"), count=i32(6), assignments=(
                cp3.CreatePartitionsAssignment(broker_ids=(BrokerId(me),)),)),
            cp3.CreatePartitionsTopic(name=TopicName("placed"), count=i32(4), assignments=(
                cp3.CreatePartitionsAssignment(broker_ids=(BrokerId(me),)),)),
        ), timeout=i32Timedelta.parse(timedelta(seconds=30)), validate_only=True)).results
        assert [(r.error_code, r.error_message) for r in grow] == [
            (ErrorCode.invalid_request, "topic 'placed' is named more than once")] * 2
        for count, lists, code, message in [
            (6, [[me]], ErrorCode.invalid_replica_assignment,
             "Attempted to add 2 additional partition(s), but only 1 assignment(s) were"
             " specified."),
            (5, [[99]], ErrorCode.invalid_replica_assignment,
             "The manual partition assignment includes broker 99, but no such broker is"
             " registered."),
            (4, [[me]], ErrorCode.invalid_partitions, None),
            (6, [[me], [me]], ErrorCode.none, None)]:
            r = client.call(37, 3, cp3.CreatePartitionsRequest(topics=(
                cp3.CreatePartitionsTopic(name=TopicName("placed"), count=i32(count),
                                          assignments=tuple(cp3.CreatePartitionsAssignment(
                                              broker_ids=tuple(BrokerId(b) for b in x))
                                              for x in lists)),),
                timeout=i32Timedelta.parse(timedelta(seconds=30)),
                validate_only=True)).results[0]
            assert r.error_code == code, (count, lists, r)
            if message is not None:
                assert r.error_message == message
    finally:
        client.close()


def test_describe_group_configs(agent_proc: AgentProcess) -> None:
    """librdkafka's 0081: DescribeConfigs of a GROUP resource (type 32) answers as Kafka 4.0's
    ConfigHelper, any group id: its GroupConfig keys at Kafka's defaults when none is stored
    (they govern consumer-protocol and share groups, which silt does not serve: stored, not
    applied; test_broker_configs sets them)."""
    admin = AdminClient({"bootstrap.servers": agent_proc.bootstrap})
    group = ConfigResource(ResourceType.GROUP, "no-such-group")
    configs = admin.describe_configs([group])[group].result(60)
    assert {k: v.value for k, v in configs.items()} == {
        "consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "5000",
        "share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "5000",
        "share.record.lock.duration.ms": "30000", "share.auto.offset.reset": "latest"}
    assert {v.source for v in configs.values()} == {ConfigSource.DEFAULT_CONFIG.value}
    client = RawClient(agent_proc.port)
    try:
        got = client.call(32, 4, dc4.DescribeConfigsRequest(resources=(
            dc4.DescribeConfigsResource(resource_type=i8(32), resource_name="g",
                                        configuration_keys=("consumer.session.timeout.ms",)),
            dc4.DescribeConfigsResource(resource_type=i8(32), resource_name="",
                                        configuration_keys=None),
            dc4.DescribeConfigsResource(resource_type=i8(8), resource_name="x",
                                        configuration_keys=None),
        ), include_synonyms=True, include_documentation=False)).results
    finally:
        client.close()
    assert [(r.error_code, r.resource_type) for r in got] == [
        (ErrorCode.none, 32), (ErrorCode.invalid_request, 32), (ErrorCode.invalid_request, 8)]
    (entry,) = got[0].configs
    assert (entry.name, entry.value, entry.config_type, entry.config_source) == (
        "consumer.session.timeout.ms", "45000", 3, ConfigSource.DEFAULT_CONFIG.value)
    assert [(s.name, s.value) for s in entry.synonyms] == [
        ("group.consumer.session.timeout.ms", "45000")]
    assert got[1].error_message == "Group name must not be empty"
