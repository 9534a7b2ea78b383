"""Consumer groups across a restart of their coordinator (issue 22): a `silt agent`
restarted on its address (so with its agent id, and the group leases its previous process
held) lists, describes and locates every group at once, next to a live second agent whose
groups it leaves alone, and consumers rejoin and resume from their commits."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as fc3
from kio.schema.list_groups.v4 import request as lg4

from .group_consumer import GroupConsumer, stop_all, wait_until
from .server import AgentProcess, Backend, RawClient
from .test_groups_clients import GROUP_ENV, Record, consumer_spec, produce

TOPIC, PARTITIONS = "events", 3
# By the hash of their ids, with two agents: on the first agent (the restarted one) ...
ON_FIRST = ("closed-0", "closed-1", "simple", "live-a")
# ... and on the second (FindCoordinator checks this before the restart).
ON_SECOND = ("closed-4", "kp")
CLOSED = ("closed-0", "closed-1", "closed-4")
WAIT_S = 30.0


def consume(bootstrap: str, group: str, n: int) -> list[Record]:
    """Join `group` (confluent-kafka), consume `n` records, commit them, leave."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000})
    got: list[Record] = []
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + WAIT_S
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.partition() or 0, msg.offset() or 0))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert len(got) == n, got
    return got


def consume_kafka_python(bootstrap: str, group: str, n: int) -> list[Record]:
    """`consume` with kafka-python."""
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=6000, heartbeat_interval_ms=500,
                             consumer_timeout_ms=20_000)
    try:
        got = [(r.partition, r.offset) for _, r in zip(range(n), consumer, strict=False)]
        consumer.commit()
    finally:
        consumer.close()
    assert len(got) == n, got
    return got


def find_coordinator(via: AgentProcess, group: str) -> int:
    """The port of the agent FindCoordinator (asked of `via`) names for `group`."""
    client = RawClient(via.port, timeout=10)
    try:
        resp = client.call(10, 3, fc3.FindCoordinatorRequest(key=group))
    finally:
        client.close()
    assert resp.error_code == ErrorCode.none, resp
    return int(resp.port)


def list_groups(agent: AgentProcess) -> dict[str, str]:
    """ListGroups asked of one agent: state by group id."""
    client = RawClient(agent.port, timeout=10)
    try:
        resp = client.call(16, 4, lg4.ListGroupsRequest())
    finally:
        client.close()
    assert resp.error_code == ErrorCode.none, resp
    return {g.group_id: g.group_state for g in resp.groups}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_restarted_coordinator_lists_describes_and_locates_its_groups_at_once(
        backend: Backend, tmp_path: Path, sig: int) -> None:
    """Groups made by confluent-kafka and kafka-python consumers (left Empty with
    commits, a "simple" commit, one member that stays subscribed throughout) on two
    agents; the first is restarted on its address (SIGKILL: its registry row stays live
    meanwhile; SIGTERM: it deregisters and the member may move to the second agent). At
    once: each agent's ListGroups is exactly the groups FindCoordinator names it for, the
    first's leases untouched by anyone else included; the admin client lists and describes
    every group once, Empty ones as Empty; consumers resume from their commits, and the
    member that stayed consumes what was produced after the restart."""
    first, second = (backend.agent(f"agent{i}", GROUP_ENV).start() for i in (0, 1))
    agents = {first.port: first, second.port: second}
    md = backend.metadata()
    md.create_topic(TOPIC, PARTITIONS)
    md.close()
    live = GroupConsumer("live", consumer_spec(first.bootstrap, "live-a", TOPIC,
                                               **{"session.timeout.ms": 10_000}),
                         tmp_path / "live.log")
    try:
        for group in (*ON_FIRST, *ON_SECOND):
            assert agents[find_coordinator(second, group)] is \
                (first if group in ON_FIRST else second), group
        before = produce(first.bootstrap, TOPIC, 30, PARTITIONS)
        for group in CLOSED:
            assert sorted(consume(first.bootstrap, group, 30)) == sorted(before)
        assert sorted(consume_kafka_python(first.bootstrap, "kp", 30)) == sorted(before)
        simple = Consumer({"bootstrap.servers": first.bootstrap, "group.id": "simple"})
        simple.commit(offsets=[TopicPartition(TOPIC, p, 5) for p in range(PARTITIONS)],
                      asynchronous=False)
        simple.close()
        live.start()
        wait_until(lambda: len({(p, o) for _, p, o in live.consumed()}) == 30, WAIT_S,
                   "the live member consumed everything", live.errors)

        registered = _registered_at(first)
        assert first.terminate(sig) == (-sig if sig == signal.SIGKILL else 0)
        first.start(same_port=True)
        wait_until(lambda: _registered_at(first) > registered, WAIT_S,
                   "the restarted agent registered")
        everyone = {*ON_FIRST, *ON_SECOND}
        held = {g: agents[find_coordinator(second, g)] for g in everyone}
        assert {g: agents[find_coordinator(first, g)] for g in everyone} == held
        moved = {g for g in ON_FIRST if held[g] is second}
        assert moved <= ({"live-a"} if sig == signal.SIGTERM else set()), moved
        listed = {a.port: list_groups(a) for a in (first, second)}
        for a in (first, second):
            assert set(listed[a.port]) == {g for g in everyone if held[g] is a}, a.port
        for group in (*CLOSED, "kp", "simple"):
            assert listed[held[group].port][group] == "Empty", group

        admin = AdminClient({"bootstrap.servers": f"{first.bootstrap},{second.bootstrap}"})
        result = admin.list_consumer_groups().result(WAIT_S)
        assert result.errors == []
        assert sorted(g.group_id for g in result.valid) == sorted(everyone)
        described = {g: f.result(WAIT_S) for g, f in
                     admin.describe_consumer_groups(sorted(everyone)).items()}
        for group in (*CLOSED, "kp"):
            d = described[group]
            assert (d.state, d.members, d.coordinator.port) == (
                ConsumerGroupState.EMPTY, [], held[group].port), group
        assert described["simple"].state is ConsumerGroupState.EMPTY

        after = produce(second.bootstrap, TOPIC, 15, PARTITIONS)
        assert sorted(consume(first.bootstrap, "closed-0", 15)) == sorted(after)
        assert sorted(consume(second.bootstrap, "closed-4", 15)) == sorted(after)
        assert sorted(consume_kafka_python(first.bootstrap, "kp", 15)) == sorted(after)
        wait_until(lambda: set(after) <= {(p, o) for _, p, o in live.consumed()}, WAIT_S,
                   "the live member consumed what came after the restart", live.errors)

        def live_described() -> bool:
            d = admin.describe_consumer_groups(["live-a"])["live-a"].result(WAIT_S)
            return d.state is ConsumerGroupState.STABLE and len(d.members) == 1

        wait_until(live_described, WAIT_S, "live-a Stable with its one member")
        assert live.stop() == 0, live.errors()
    finally:
        stop_all([live])
        for a in (first, second):
            a.terminate()


def _registered_at(agent: AgentProcess) -> int:
    """When the agent last registered (-1: not live), as the registry has it: a restarted
    agent registers just after it listens."""
    md = agent.metadata()
    try:
        return max((a.registered_at_ms for a in md.live_brokers() if a.port == agent.port),
                   default=-1)
    finally:
        md.close()
