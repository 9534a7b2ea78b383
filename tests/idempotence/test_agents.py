"""The agent registry (register, heartbeat, sessions, deregister) on both backends, and the
pure leader placement over the live agents."""

from __future__ import annotations

from collections import Counter

import pytest

from agent.placement import leader, on_listener
from clock import ManualClock
from metadata import AgentInfo, MetadataStore
from metadata.config import MetadataConfig
from metadata.errors import UnknownAgentError
from settings import SettingError


def test_register_heartbeat_expire_deregister(md: MetadataStore, clock: ManualClock) -> None:
    timeout = md.config.broker_session_timeout_ms
    a = md.register_agent("agent-a", "127.0.0.1", 9092)
    b = md.register_agent("agent-b", "10.0.0.2", 9093)
    assert a.node_id != b.node_id
    assert [(x.agent_id, x.host, x.port) for x in md.live_brokers()] == [
        ("agent-a", "127.0.0.1", 9092), ("agent-b", "10.0.0.2", 9093)]
    clock.advance(timeout - 1)
    assert md.heartbeat_agent("agent-a").heartbeat_at_ms == clock.now_ms()
    clock.advance(1)  # b's session is over, a heartbeat 1 ms ago
    assert [x.agent_id for x in md.live_brokers()] == ["agent-a"]
    md.deregister_agent("agent-a")
    md.deregister_agent("agent-a")  # idempotent
    assert md.live_brokers() == []
    with pytest.raises(UnknownAgentError):
        md.heartbeat_agent("agent-a")
    with pytest.raises(UnknownAgentError):
        md.heartbeat_agent("never-registered")
    # Re-registering keeps the node id and may move the address.
    again = md.register_agent("agent-a", "127.0.0.1", 19092)
    assert again.node_id == a.node_id and again.port == 19092
    assert [x.agent_id for x in md.live_brokers()] == ["agent-a"]
    c = md.register_agent("agent-c", "h", 1)
    assert c.node_id not in (a.node_id, b.node_id)


def test_endpoints_per_listener(md: MetadataStore) -> None:
    """Each agent's advertised endpoint per listener is stored (schema v9) and read back; a
    client of a listener sees only the agents having it, at their endpoint there."""
    a = md.register_agent("a", "10.0.0.1", 9092, {"INTERNAL": ("10.0.0.1", 9092),
                                                   "EXTERNAL": ("kafka-a.example", 9093)})
    md.register_agent("b", "10.0.0.2", 9092, {"INTERNAL": ("10.0.0.2", 9092)})
    assert a.endpoint("EXTERNAL") == ("kafka-a.example", 9093)
    live = md.live_brokers()
    assert [x.endpoints for x in live] == [
        (("INTERNAL", "10.0.0.1", 9092), ("EXTERNAL", "kafka-a.example", 9093)),
        (("INTERNAL", "10.0.0.2", 9092),)]
    assert [(x.agent_id, x.host, x.port) for x in on_listener(live, "EXTERNAL")] == [
        ("a", "kafka-a.example", 9093)]
    assert [x.host for x in on_listener(live, "INTERNAL")] == ["10.0.0.1", "10.0.0.2"]
    assert on_listener(live, "SSL") == []
    # A row from before listeners had names (no endpoints): host:port on every listener.
    legacy = md.register_agent("c", "h", 1)
    assert legacy.endpoints == () and legacy.endpoint("ANY") == ("h", 1)


def test_session_timeout_setting() -> None:
    with pytest.raises(SettingError, match=r"broker\.heartbeat\.interval\.ms"):
        MetadataConfig(broker_session_timeout_ms=1000, broker_heartbeat_interval_ms=1000)


def _agents(n: int) -> list[AgentInfo]:
    return [AgentInfo(i * 3 + 1, f"a{i}", "h", 9000 + i, 0, 0) for i in range(n)]


def test_placement_even_and_stable() -> None:
    agents = _agents(4)
    for topic in ("orders", "users", "x"):
        counts = Counter(leader(topic, p, agents).node_id for p in range(40))
        assert sorted(counts.values()) == [10, 10, 10, 10]
        # Same set in any order: same leaders.
        assert [leader(topic, p, agents) for p in range(40)] == [
            leader(topic, p, list(reversed(agents))) for p in range(40)]
    # Partition 0 of different topics does not all land on one agent.
    assert len({leader(f"topic-{i}", 0, agents).node_id for i in range(20)}) > 1
    with pytest.raises(ValueError):
        leader("t", 0, [])


def test_placement_of_registered_agents(md: MetadataStore) -> None:
    for i in range(3):
        md.register_agent(f"agent-{i}", "127.0.0.1", 9092 + i)
    live = md.live_brokers()
    leaders = {leader("t", p, live).agent_id for p in range(6)}
    assert leaders == {"agent-0", "agent-1", "agent-2"}
