"""Long-polling fetches are woken by commits of OTHER agents on the same metadata store
(metadata/notify.py: NOTIFY/LISTEN on PostgreSQL, PRAGMA data_version on SQLite)."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from fileformat import build_batch

from .server import AgentProcess, RawClient
from .test_raw import produce

MAX_WAIT_MS = 30_000  # what the consumer asks each fetch to wait for data
WOKEN_S = 10.0  # the test's own wait: well below MAX_WAIT_MS, so only a wake-up meets it


def _produce_through(agent: AgentProcess, topic: str, value: bytes) -> int:
    """Produce one record through `agent` itself (a raw client: stock clients would follow
    the partition's leader, which may be the other agent). Returns its offset."""
    client = RawClient(agent.port)
    try:
        ((error, offset),) = produce(
            client, {(topic, 0): build_batch([(0, 1_000, None, value, [])])}).values()
    finally:
        client.close()
    assert error == 0
    return offset


def test_fetch_through_one_agent_is_woken_by_a_commit_through_another(
        two_agents: tuple[AgentProcess, AgentProcess]) -> None:
    a, b = two_agents
    md = a.metadata()
    md.create_topic("wake", 1)
    md.close()
    assert _produce_through(a, "wake", b"first") == 0  # read at once: then B long-polls
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": MAX_WAIT_MS,
                         "socket.timeout.ms": 2 * MAX_WAIT_MS})
    try:
        consumer.assign([TopicPartition("wake", 0, 0)])
        msg = consumer.poll(60)
        assert msg is not None and msg.error() is None and msg.value() == b"first"
        # The consumer's next fetch (offset 1) now long-polls agent B; give it time to be
        # sent and start waiting, so the commit below lands during its wait.
        assert consumer.poll(1) is None
        assert _produce_through(a, "wake", b"second") == 1  # agent A only
        msg = consumer.poll(WOKEN_S)
        assert msg is not None, "agent B's long-poll was not woken by agent A's commit"
        assert msg.error() is None and (msg.offset(), msg.value()) == (1, b"second")
    finally:
        consumer.close()
