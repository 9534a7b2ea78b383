"""Consumer groups through stock clients against real `silt agent` processes: members join,
leave, are killed, and the coordinator itself is killed, and every record is still consumed
at least once, re-read only where a commit had not landed (issue 12).

The group consumers of the churn, coordinator, cooperative and static tests are child
processes (`group_consumer`) that commit each record synchronously and log what they
consumed and committed with a system-wide clock, so the checks order events across
processes."""

from __future__ import annotations

import asyncio
import bisect
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as fc3

from .group_consumer import GroupConsumer, stop_all, wait_until
from .server import AgentProcess, Backend, RawClient

# No initial rebalance delay, and short sessions allowed, so a test's rebalances take ~1 s.
GROUP_ENV = {"SILT_AGENT_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
             "SILT_AGENT_GROUP_MIN_SESSION_TIMEOUT_MS": "1000"}
# A killed agent leaves the registry (and its group leases lapse) 3 s after its last heartbeat.
FAST_LEASE_ENV = {**GROUP_ENV, "SILT_METADATA_BROKER_SESSION_TIMEOUT_MS": "3000",
                  "SILT_METADATA_BROKER_HEARTBEAT_INTERVAL_MS": "500"}
WAIT_S = 30.0
Record = tuple[int, int]  # partition, offset
CALLBACKS = ("A", "R", "L")  # assigned, revoked, lost


def consumer_spec(bootstrap: str, group: str, topic: str, **config: Any) -> dict[str, Any]:
    """A `GroupConsumer` spec: commit per record, start at the earliest offset, 4 s sessions."""
    return {"topic": topic, "config": {
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 4000,
        "heartbeat.interval.ms": 500, **config}}


class KeyedProducer(threading.Thread):
    """Keyed records (idempotent, acks=all), one about every `interval_s`, until `finish()`;
    the (partition, offset) of every ack is kept."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.interval_s = bootstrap, topic, interval_s
        self.acked: set[Record] = set()
        self.failed: list[KafkaError] = []
        self.unflushed = 0
        self._stop_producing = threading.Event()

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.acked.add((msg.partition() or 0, msg.offset() or 0))
        else:
            self.failed.append(err)

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "message.timeout.ms": 60_000})
        i = 0
        while not self._stop_producing.is_set():
            producer.produce(self.topic, b"value-%d" % i, b"key-%d" % (i % 97),
                             on_delivery=self._on_delivery)
            producer.poll(self.interval_s)
            i += 1
        self.unflushed = producer.flush(60)

    def stop(self) -> None:
        """Stop producing and wait for the outstanding acks."""
        self._stop_producing.set()
        if self.is_alive():
            self.join(90)

    def finish(self) -> set[Record]:
        """`stop()`, and return what was acked (all that was produced)."""
        self.stop()
        assert (self.is_alive(), self.unflushed, self.failed) == (False, 0, [])
        return self.acked


def produce(bootstrap: str, topic: str, n: int, partitions: int) -> set[Record]:
    """`n` keyed records round-robin over the partitions, acked; their (partition, offset)."""
    acked: set[Record] = set()

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err  # raised again by flush()
        acked.add((msg.partition() or 0, msg.offset() or 0))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, b"v%d" % i, b"k%d" % i, partition=i % partitions,
                         on_delivery=on_delivery)
    assert producer.flush(60) == 0
    assert len(acked) == n
    return acked


def describe(consumers: list[GroupConsumer]) -> str:
    """The consumers' logs tails and stderr, for a failed wait."""
    out = []
    for c in consumers:
        lines = [f"{x.kind} {x.fields}" for x in c.lines() if x.kind != "C"][-30:]
        out.append(f"--- {c.name}: held {sorted(c.assignment())}\n" + "\n".join(lines)
                   + ("\n" + c.errors() if c.errors() else ""))
    return "\n".join(out)


def settled(members: list[GroupConsumer], partitions: int) -> bool:
    """Every member holds partitions, together each partition exactly once, and each has
    consumed a record since its last assignment callback."""
    held = [c.assignment() for c in members]
    if any(not h for h in held) or sum(map(len, held)) != partitions:
        return False
    if set().union(*held) != set(range(partitions)):
        return False
    for c in members:
        lines = c.lines()
        last_assign = max(x.t_ns for x in lines if x.kind == "A")
        if not any(x.kind == "C" and x.t_ns > last_assign for x in lines):
            return False
    return True


def wait_settled(members: list[GroupConsumer], partitions: int, everyone: list[GroupConsumer]
                 ) -> None:
    wait_until(lambda: settled(members, partitions), WAIT_S,
               f"{[c.name for c in members]} to share {partitions} partitions",
               lambda: describe(everyone))


def consumed_by(consumers: list[GroupConsumer]) -> dict[Record, list[str]]:
    """Who consumed each record (a name per time it was consumed)."""
    readers: dict[Record, list[str]] = defaultdict(list)
    for c in consumers:
        for _, p, o in c.consumed():
            readers[(p, o)].append(c.name)
    return readers


def check_at_least_once(produced: set[Record], consumers: list[GroupConsumer]
                        ) -> dict[Record, list[str]]:
    """Every produced record was consumed, and none was consumed after a commit past it
    had returned (to any member: a committed record is never handed out again); returns
    the records consumed more than once, with their readers."""
    readers = consumed_by(consumers)
    missing = sorted(produced - readers.keys())
    assert missing == [], f"{len(missing)} records never consumed, first {missing[:10]}"
    # per partition, the highest committed next offset as of each logged commit's time
    commits: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for t, p, n in sorted(k for c in consumers for k in c.commits()):
        high = max(n, commits[p][-1][1]) if commits[p] else n
        commits[p].append((t, high))
    reread = []
    for c in consumers:
        for t, p, o in c.consumed():
            i = bisect.bisect_left(commits[p], (t, -1)) - 1
            if i >= 0 and commits[p][i][1] > o:
                reread.append((c.name, p, o, commits[p][i][1]))
    assert reread == [], f"records consumed after their commit (name, p, o, committed): " \
                         f"{reread[:10]}"
    return {r: names for r, names in readers.items() if len(names) > 1}


def find_coordinator(via: AgentProcess, group: str, agents: list[AgentProcess]
                     ) -> AgentProcess:
    """The agent FindCoordinator (asked of `via`) names for `group`."""
    client = RawClient(via.port, timeout=10)
    try:
        resp = client.call(10, 3, fc3.FindCoordinatorRequest(key=group))
    finally:
        client.close()
    assert resp.error_code == ErrorCode.none, resp
    [agent] = [a for a in agents if a.port == resp.port]
    return agent


def group_members(bootstrap: str, group: str) -> dict[str | None, str]:
    """DescribeGroups: member id by group instance id (None: a dynamic member)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(30)
    return {m.group_instance_id: m.member_id for m in description.members}


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition (OffsetFetch, no join)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in tps}


@pytest.fixture
def group_agent(tmp_path: Path) -> Iterator[AgentProcess]:
    """One agent on file:// + SQLite with fast group settings."""
    proc = Backend(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                   tmp_path).agent("agent", GROUP_ENV).start()
    yield proc
    proc.terminate()


# --------------------------------------------------------------------------- churn


def test_churn_leave_join_and_kill_consume_every_record_at_least_once(
        backend: Backend, tmp_path: Path) -> None:
    """Three members, then one leaves (close), one joins, one is SIGKILLed, while a producer
    produces: every record is consumed, and only the killed member's uncommitted record on a
    partition it held is read twice (at most one per partition)."""
    partitions, topic, group = 12, "churn", "churners"
    agents = [backend.agent(f"agent{i}", GROUP_ENV).start()
              for i in range(1 if backend.store_url.startswith("file:") else 2)]
    md = backend.metadata()
    md.create_topic(topic, partitions)
    md.close()
    producer = KeyedProducer(agents[0].bootstrap, topic)
    consumers: list[GroupConsumer] = []

    def join(name: str) -> GroupConsumer:
        bootstrap = agents[len(consumers) % len(agents)].bootstrap
        consumers.append(GroupConsumer(name, consumer_spec(bootstrap, group, topic),
                                       tmp_path / f"{name}.log").start())
        return consumers[-1]

    try:
        producer.start()
        c0, c1, c2 = join("c0"), join("c1"), join("c2")
        wait_settled([c0, c1, c2], partitions, consumers)
        assert c0.stop() == 0, c0.errors()  # close(): revoke, LeaveGroup
        wait_settled([c1, c2], partitions, consumers)
        c3 = join("c3")
        wait_settled([c1, c2, c3], partitions, consumers)
        killed_held = c1.assignment()
        assert c1.stop(signal.SIGKILL) == -signal.SIGKILL
        wait_settled([c2, c3], partitions, consumers)  # after c1's session timed out
        produced = producer.finish()
        wait_until(lambda: produced <= consumed_by(consumers).keys(), WAIT_S,
                   "every produced record consumed", lambda: describe(consumers))
        assert [c.stop() for c in (c2, c3)] == [0, 0], describe(consumers)
    finally:
        producer.stop()
        stop_all(consumers)
        for agent in agents:
            agent.terminate()

    twice = check_at_least_once(produced, consumers)
    last_commit = {p: n for _, p, n in c1.commits()}  # in time order: the last one wins
    window = Counter(p for p, _ in twice)
    print(f"\n{backend.store_url.split(':')[0]}: {len(produced)} records, at-least-once "
          f"window of the killed member: {sorted(twice)} (held {sorted(killed_held)})")
    for (p, o), names in twice.items():
        assert "c1" in names and len(names) == 2, (p, o, names)
        assert p in killed_held and o >= last_commit.get(p, 0), (p, o, last_commit.get(p))
    assert all(n <= 1 for n in window.values()), window
    assert [x for x in c0.lines() if x.kind == "X"] != []  # c0 closed cleanly


# --------------------------------------------------------------------------- coordinator


def test_consumers_resume_from_their_commits_when_the_coordinator_is_killed(
        backend: Backend, tmp_path: Path) -> None:
    """Two members commit each record; the agent coordinating the group is SIGKILLed: they
    find the other agent (once the lease lapses), skip nothing, re-read only records whose
    commit had not returned, and their last commits are stored."""
    partitions, topic, group, n = 6, "orders", "resumers", 1_200
    agents = [backend.agent(f"agent{i}", FAST_LEASE_ENV).start() for i in (0, 1)]
    md = backend.metadata()
    md.create_topic(topic, partitions)
    md.close()
    consumers: list[GroupConsumer] = []
    try:
        produced = produce(agents[0].bootstrap, topic, n, partitions)
        consumers += [
            GroupConsumer(f"c{i}", {**consumer_spec(agents[i].bootstrap, group, topic),
                                    "sleep_ms": 5}, tmp_path / f"c{i}.log").start()
            for i in (0, 1)]
        wait_settled(consumers, partitions, consumers)
        wait_until(lambda: sum(len(c.commits()) for c in consumers) >= 100, WAIT_S,
                   "100 commits", lambda: describe(consumers))
        coordinator = find_coordinator(agents[0], group, agents)
        [survivor] = [a for a in agents if a is not coordinator]
        killed_at = time.monotonic_ns()
        assert coordinator.terminate(signal.SIGKILL) == -signal.SIGKILL
        wait_until(lambda: produced <= consumed_by(consumers).keys(), 60,
                   "every record consumed", lambda: describe(consumers))
        assert find_coordinator(survivor, group, agents) is survivor
        # the final commits went through the new coordinator and are stored
        ends = {p: 1 + max(o for q, o in produced if q == p) for p in range(partitions)}
        wait_until(lambda: committed(survivor.bootstrap, group, topic, partitions) == ends,
                   WAIT_S, f"committed offsets {ends}", lambda: describe(consumers))
        assert [c.stop() for c in consumers] == [0, 0], describe(consumers)
    finally:
        stop_all(consumers)
        for agent in agents:
            agent.terminate()
    before = sum(1 for c in consumers for t, *_ in c.commits() if t < killed_at)
    after = sum(1 for c in consumers for t, *_ in c.commits() if t > killed_at)
    assert before >= 100 and after > 0, (before, after)
    twice = check_at_least_once(produced, consumers)
    print(f"\n{backend.store_url.split(':')[0]}: {before} commits before the kill, {after} "
          f"after; read twice: {sorted(twice)}")


# --------------------------------------------------------------------------- other clients


def test_kafka_python_group_consumer_resumes_from_its_commit(group_agent: AgentProcess) -> None:
    topic, group = "kp", "kp-group"
    md = group_agent.metadata()
    md.create_topic(topic, 3)
    md.close()
    first = produce(group_agent.bootstrap, topic, 60, 3)

    def consume(count: int) -> list[Record]:
        consumer = KafkaConsumer(
            topic, bootstrap_servers=group_agent.bootstrap, group_id=group,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
            heartbeat_interval_ms=500, consumer_timeout_ms=20_000)
        try:
            got = [(r.partition, r.offset) for _, r in zip(range(count), consumer, strict=False)]
            consumer.commit()
            assert {p: consumer.committed(KTopicPartition(topic, p)) for p in range(3)} == {
                p: 1 + max(o for q, o in got if q == p) for p in range(3)}
        finally:
            consumer.close()
        return got

    assert sorted(consume(60)) == sorted(first)
    second = produce(group_agent.bootstrap, topic, 30, 3)
    assert sorted(consume(30)) == sorted(second)  # from the commit: nothing re-read
    assert committed(group_agent.bootstrap, group, topic, 3) == {p: 30 for p in range(3)}


def test_aiokafka_group_consumer_resumes_from_its_commit(group_agent: AgentProcess) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    topic, group = "aio", "aio-group"
    md = group_agent.metadata()
    md.create_topic(topic, 3)
    md.close()
    first = produce(group_agent.bootstrap, topic, 60, 3)

    async def consume(count: int) -> list[Record]:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=group_agent.bootstrap, group_id=group,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000,
            heartbeat_interval_ms=500)
        await consumer.start()
        try:
            got = []
            for _ in range(count):
                r = await asyncio.wait_for(consumer.getone(), 20)
                got.append((r.partition, r.offset))
            await consumer.commit()
            stored = {p: await consumer.committed(ATopicPartition(topic, p)) for p in range(3)}
            assert stored == {p: 1 + max(o for q, o in got if q == p) for p in range(3)}
        finally:
            await consumer.stop()
        return got

    assert sorted(asyncio.run(consume(60))) == sorted(first)
    second = produce(group_agent.bootstrap, topic, 30, 3)
    assert sorted(asyncio.run(consume(30))) == sorted(second)  # from the commit
    assert committed(group_agent.bootstrap, group, topic, 3) == {p: 30 for p in range(3)}


# --------------------------------------------------------------------------- cooperative


def test_cooperative_sticky_third_member_takes_partitions_incrementally(
        group_agent: AgentProcess, tmp_path: Path) -> None:
    """cooperative-sticky: a third member joins two; the two give up only the partitions that
    move (incremental revoke, the rest kept throughout), the third gets exactly those, and
    consumption goes on."""
    partitions, topic, group = 6, "coop", "cooperators"
    md = group_agent.metadata()
    md.create_topic(topic, partitions)
    md.close()
    producer = KeyedProducer(group_agent.bootstrap, topic, interval_s=0.02)
    spec = consumer_spec(group_agent.bootstrap, group, topic,
                         **{"partition.assignment.strategy": "cooperative-sticky"})
    consumers: list[GroupConsumer] = []
    try:
        producer.start()
        consumers += [GroupConsumer(f"c{i}", spec, tmp_path / f"c{i}.log").start()
                      for i in (0, 1)]
        wait_settled(consumers, partitions, consumers)
        before = {c.name: c.assignment() for c in consumers}
        joined_at = time.monotonic_ns()
        consumers.append(GroupConsumer("c2", spec, tmp_path / "c2.log").start())
        wait_settled(consumers, partitions, consumers)
        produced = producer.finish()
        wait_until(lambda: produced <= consumed_by(consumers).keys(), WAIT_S,
                   "every produced record consumed", lambda: describe(consumers))
        stopping_at = time.monotonic_ns()
        assert [c.stop() for c in consumers] == [0, 0, 0], describe(consumers)
    finally:
        producer.stop()
        stop_all(consumers)
    c0, c1, c2 = consumers
    moved: set[int] = set()
    for c in (c0, c1):
        events = [x for x in c.lines() if joined_at < x.t_ns < stopping_at and x.kind in CALLBACKS]
        revoked = set().union(*[x.partitions() for x in events if x.kind == "R"])
        assert [x for x in events if x.kind == "L"] == []
        assert set().union(*[x.partitions() for x in events if x.kind == "A"]) == set()
        # an incremental revoke of what moves; what it kept was never revoked
        assert set() < revoked < before[c.name], (c.name, before[c.name], revoked)
        assert c.assignment() == set()  # its close revoked the rest
        moved |= revoked
    c2_events = [x for x in c2.lines() if x.t_ns < stopping_at and x.kind in CALLBACKS]
    assert set().union(*[x.partitions() for x in c2_events if x.kind == "A"]) == moved
    assert [x for x in c2_events if x.kind != "A"] == []
    check_at_least_once(produced, consumers)


# --------------------------------------------------------------------------- static


def test_static_member_restarts_within_its_session_without_a_rebalance(
        group_agent: AgentProcess, tmp_path: Path) -> None:
    """A static member (group.instance.id) closes (no LeaveGroup) and a new process with the
    same instance id joins within session.timeout.ms: it gets the same partitions, the other
    member keeps its partitions and member id, and sees no revoke."""
    partitions, topic, group = 4, "static", "statics"
    md = group_agent.metadata()
    md.create_topic(topic, partitions)
    md.close()
    producer = KeyedProducer(group_agent.bootstrap, topic, interval_s=0.02)
    bootstrap = group_agent.bootstrap
    static = consumer_spec(bootstrap, group, topic, **{"group.instance.id": "static-a",
                                                       "session.timeout.ms": 20_000})
    a1 = GroupConsumer("a1", static, tmp_path / "a1.log")
    b = GroupConsumer("b", consumer_spec(bootstrap, group, topic), tmp_path / "b.log")
    a2 = GroupConsumer("a2", static, tmp_path / "a2.log")
    consumers = [a1, b, a2]
    try:
        producer.start()
        a1.start(), b.start()
        wait_settled([a1, b], partitions, consumers)
        settled_at = time.monotonic_ns()
        b_held, a_held = b.assignment(), a1.assignment()
        members = group_members(bootstrap, group)
        assert a1.stop() == 0, a1.errors()
        # the static member is still in the group: close() sent no LeaveGroup
        assert group_members(bootstrap, group) == members
        a2.start()
        wait_settled([a2, b], partitions, consumers)
        produced = producer.finish()
        wait_until(lambda: produced <= consumed_by(consumers).keys(), WAIT_S,
                   "every produced record consumed", lambda: describe(consumers))
        rejoined = group_members(bootstrap, group)
        stopping_at = time.monotonic_ns()
        assert [b.stop(), a2.stop()] == [0, 0], describe(consumers)
    finally:
        producer.stop()
        stop_all(consumers)
    assert next((x.kind, x.partitions()) for x in a2.lines() if x.kind in CALLBACKS) == (
        "A", a_held)
    # b: no callback at all from the settled group until its own close
    assert [x for x in b.lines() if settled_at < x.t_ns < stopping_at and x.kind in CALLBACKS] == []
    assert b.assignment() == set() and b_held
    assert rejoined.keys() == members.keys() and rejoined[None] == members[None]
    assert rejoined["static-a"] != members["static-a"]  # a new member id, same instance
    check_at_least_once(produced, consumers)
