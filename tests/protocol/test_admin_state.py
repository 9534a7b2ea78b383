"""Kafka admin APIs over the store's state, through a real `silt agent`: DescribeLogDirs
(the object store as one log dir, sizes from the metadata), DescribeProducers (idempotent
producers' state), legacy AlterConfigs (Kafka's full replacement of a topic's configs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource, ConfigSource
from kafka import KafkaAdminClient, TopicPartition
from kafka import errors as kerrors

from .server import AgentProcess


@pytest.fixture
def admin(agent_proc: AgentProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=agent_proc.bootstrap)
    yield client
    client.close()


def _produce(agent_proc: AgentProcess, topic: str, partition: int, n: int, size: int,
             idempotent: bool) -> None:
    producer = Producer({"bootstrap.servers": agent_proc.bootstrap,
                         "enable.idempotence": idempotent, "linger.ms": 5})
    for _ in range(n):
        producer.produce(topic, b"v" * size, partition=partition)
    assert producer.flush(60) == 0


def test_describe_log_dirs_is_the_store(agent_proc: AgentProcess,
                                        admin: KafkaAdminClient) -> None:
    """One log dir, the store's URL; each partition's size the bytes of its live segments
    (what `silt topics describe` sums), 0 for an empty one; unknown topics left out."""
    md = agent_proc.metadata()
    md.create_topic("logs", 2)
    _produce(agent_proc, "logs", 1, 20, 100, idempotent=False)
    stored = {info.partition: nbytes for info, _, nbytes, _ in md.partition_summaries("logs")}
    md.close()
    assert stored[1] > 2000 and stored[0] == 0
    [broker] = admin.describe_log_dirs()
    [log_dir] = broker["results"] if "results" in broker else broker["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == agent_proc.store_url
    sizes = {(t["name"], p["partition_index"]): p["partition_size"]
             for t in log_dir["topics"] for p in t["partitions"]}
    assert sizes == {("logs", 0): 0, ("logs", 1): stored[1]}
    [broker] = admin.describe_log_dirs({"logs": [1], "nope": [0]})
    [log_dir] = broker["results"] if "results" in broker else broker["log_dirs"]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in log_dir["topics"]] == [("logs", [1])]


def test_describe_producers_lists_idempotent_producers(agent_proc: AgentProcess,
                                                       admin: KafkaAdminClient) -> None:
    """An idempotent producer's id, epoch and last sequence on the partition it wrote; none
    on the other; a partition past the topic's UNKNOWN_TOPIC_OR_PARTITION."""
    md = agent_proc.metadata()
    md.create_topic("ids", 2)
    md.close()
    _produce(agent_proc, "ids", 0, 7, 10, idempotent=True)
    states = admin.describe_producers([TopicPartition("ids", 0), TopicPartition("ids", 1)])
    [active] = states[TopicPartition("ids", 0)].active_producers
    assert (active.producer_id >= 0, active.producer_epoch, active.last_sequence) == (
        True, 0, 6)
    assert active.last_timestamp > 0 and active.coordinator_epoch == -1
    assert list(states[TopicPartition("ids", 1)].active_producers) == []
    with pytest.raises(kerrors.UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition("ids", 5)])


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replaces_a_topics_configs(agent_proc: AgentProcess) -> None:
    """AlterConfigs (key 33) sets exactly the configs given: an override not given goes
    back to its default; a bad value is INVALID_CONFIG and changes nothing; validate_only
    changes nothing."""
    md = agent_proc.metadata()
    md.create_topic("cfg", 1, {"retention.ms": "1000", "segment.ms": "5000"})
    md.close()
    admin = AdminClient({"bootstrap.servers": agent_proc.bootstrap})
    res = ConfigResource("topic", "cfg", set_config={"max.message.bytes": "2000"})
    admin.alter_configs([res])[res].result(30)

    def described() -> dict[str, tuple[str, int]]:
        got = admin.describe_configs([ConfigResource("topic", "cfg")])
        entries = next(iter(got.values())).result(30)
        return {k: (e.value, e.source) for k, e in entries.items()
                if k in ("retention.ms", "segment.ms", "max.message.bytes")}

    dynamic, default = ConfigSource.DYNAMIC_TOPIC_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value
    assert described() == {"max.message.bytes": ("2000", dynamic),
                           "retention.ms": ("604800000", default),
                           "segment.ms": ("604800000", default)}
    bad = ConfigResource("topic", "cfg", set_config={"retention.ms": "soon"})
    with pytest.raises(KafkaException) as refused:
        admin.alter_configs([bad])[bad].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
    check = ConfigResource("topic", "cfg", set_config={"retention.ms": "5"})
    admin.alter_configs([check], validate_only=True)[check].result(30)
    assert described()["max.message.bytes"] == ("2000", dynamic)
