"""Admin through Kafka clients: CreateTopics with configs validated as `silt topics`."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KNewTopic
from kafka.errors import InvalidConfigurationError, TopicAlreadyExistsError

from .server import AgentProcess


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
