"""Consumer groups over the wire with a raw kio client, against real `silt agent` processes:
the exact error codes and state moves of Kafka's classic group protocol (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup), committed offsets (OffsetCommit, OffsetFetch, OffsetDelete) and the
group admin APIs (DescribeGroups, ListGroups, DeleteGroups, FindCoordinator).

The reference is Apache Kafka's classic coordinator, core/src/main/scala/kafka/coordinator/
group/GroupCoordinator.scala (3.x: validateCurrentMember, doNewMemberJoinGroup,
doCurrentMemberJoinGroup, validateSyncGroup, validateHeartbeat, validateOffsetCommit,
handleCommitOffsets, handleLeaveGroup, handleDeleteGroups, handleDeleteOffsets,
handleDescribeGroup, handleListGroups), GroupMetadata.scala (supportsProtocols,
isSubscribedToTopic, summary), MemberMetadata.scala (hasSatisfiedHeartbeat) and
KafkaApis.handleJoinGroupRequest; each check names what it relies on. Tests named
`..._as_kafka` at the end pin answers where the agent still differs from Kafka.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import select
import signal
import struct
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kio.index import load_request_schema
from kio.schema.consumer_protocol_subscription import v1 as sub1
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i8, i32, i32Timedelta, i64

from agent import AgentConfig
from agent.protocol.apis import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)

from .server import AgentProcess, Backend, RawClient
from .test_backpressure import _until
from .test_idempotent import _wait_live

E = ErrorCode
MIN_SESSION_MS = 1_000
MAX_SESSION_MS = AgentConfig().group_max_session_timeout_ms  # the default
METADATA_MAX_BYTES = AgentConfig().offset_metadata_max_bytes  # the default
# Fast groups: the first rebalance does not wait for more members, and sessions may be short.
GROUP_ENV = {"SILT_AGENT_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
             "SILT_AGENT_GROUP_MIN_SESSION_TIMEOUT_MS": str(MIN_SESSION_MS)}
LONG_MS = 30_000  # a session or rebalance timeout no test outlives
ANSWER_S = 10.0  # a bound on an answer due at once (far below LONG_MS)

# Versions used unless a test says otherwise (the newest the agent serves).
JOIN_V, SYNC_V, HEARTBEAT_V, LEAVE_V, COMMIT_V, FETCH_V = 9, 5, 4, 5, 9, 7

TOPIC, OTHER_TOPIC, PARTITIONS = "t", "u", 2
RANGE = "range"

Offsets = dict[tuple[str, int], tuple[int, int, str | None]]  # (offset, leader epoch, metadata)
Connect = Callable[[], RawClient]


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(timedelta(milliseconds=ms))


def build(api_key: int, version: int, entity: str | None = None, /, **fields: Any) -> Any:
    """The request (or its nested `entity`) of this API version, given those of `fields` the
    version has, so that one call serves every version of an API."""
    cls = load_request_schema(api_key, version)
    if entity is not None:
        cls = getattr(sys.modules[cls.__module__], entity)
    have = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in have})


def subscription(*topics: str) -> bytes:
    """A consumer's JoinGroup metadata: a ConsumerProtocolSubscription v1 after its int16
    version, as the Java consumer writes it."""
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 1))
    entity_writer(sub1.ConsumerProtocolSubscription)(
        buf, sub1.ConsumerProtocolSubscription(topics=topics, owned_partitions=()))
    return buf.getvalue()


def answered(client: RawClient, wait_s: float = 0.3) -> bool:
    """Whether a response is waiting on `client`'s socket (within `wait_s`)."""
    return bool(select.select([client.sock], [], [], wait_s)[0])


# ------------------------------------------------------------------ one member


@dataclass
class Member:
    """A group member on its own connection; it keeps the member id and generation its last
    successful JoinGroup gave it. Requests take overrides for the error checks."""

    client: RawClient
    group: str
    instance: str | None = None
    session_ms: int = LONG_MS
    rebalance_ms: int = LONG_MS
    protocol_type: str = "consumer"
    protocols: tuple[tuple[str, bytes], ...] = ((RANGE, subscription(TOPIC)),)
    member_id: str = ""
    generation: int = -1

    def join_request(self, version: int) -> Any:
        return build(JOIN_GROUP, version, group_id=self.group,
                     session_timeout=_ms(self.session_ms),
                     rebalance_timeout=_ms(self.rebalance_ms), member_id=self.member_id,
                     group_instance_id=self.instance, protocol_type=self.protocol_type,
                     protocols=tuple(build(JOIN_GROUP, version, "JoinGroupRequestProtocol",
                                           name=name, metadata=metadata)
                                     for name, metadata in self.protocols),
                     reason=None)

    def start_join(self, version: int = JOIN_V) -> None:
        """Send a JoinGroup, after the MEMBER_ID_REQUIRED round a new dynamic member of v4+
        makes first; its answer (which waits for the rebalance) is read by `joined`."""
        if not self.member_id and self.instance is None and version >= 4:
            resp = self.client.call(JOIN_GROUP, version, self.join_request(version))
            assert resp.error_code == E.member_id_required, resp
            self.member_id = resp.member_id
        self.client.send_raw(self.client.frame(JOIN_GROUP, version, self.join_request(version)))

    def joined(self, version: int = JOIN_V) -> Any:
        resp = self.client.receive(JOIN_GROUP, version)
        if resp.error_code == E.none:
            self.member_id, self.generation = resp.member_id, int(resp.generation_id)
        return resp

    def join(self, version: int = JOIN_V) -> Any:
        self.start_join(version)
        return self.joined(version)

    def start_sync(self, assignments: Mapping[str, bytes] | None = None,
                   version: int = SYNC_V, protocol_name: str | None = None,
                   generation: int | None = None) -> None:
        self.client.send_raw(self.client.frame(SYNC_GROUP, version, build(
            SYNC_GROUP, version, group_id=self.group,
            generation_id=i32(self.generation if generation is None else generation),
            member_id=self.member_id, group_instance_id=self.instance,
            protocol_type=self.protocol_type, protocol_name=protocol_name or RANGE,
            assignments=tuple(build(SYNC_GROUP, version, "SyncGroupRequestAssignment",
                                    member_id=member_id, assignment=data)
                              for member_id, data in (assignments or {}).items()))))

    def synced(self, version: int = SYNC_V) -> Any:
        return self.client.receive(SYNC_GROUP, version)

    def sync(self, assignments: Mapping[str, bytes] | None = None, version: int = SYNC_V,
             protocol_name: str | None = None, generation: int | None = None) -> Any:
        self.start_sync(assignments, version, protocol_name, generation)
        return self.synced(version)

    def heartbeat(self, version: int = HEARTBEAT_V, generation: int | None = None,
                  member_id: str | None = None) -> ErrorCode:
        resp = self.client.call(HEARTBEAT, version, build(
            HEARTBEAT, version, group_id=self.group,
            generation_id=i32(self.generation if generation is None else generation),
            member_id=self.member_id if member_id is None else member_id,
            group_instance_id=self.instance))
        return ErrorCode(resp.error_code)

    def commit(self, offsets: Mapping[tuple[str, int], int], version: int = COMMIT_V,
               generation: int | None = None) -> dict[tuple[str, int], ErrorCode]:
        return commit(self.client, self.group, offsets, version=version,
                      generation=self.generation if generation is None else generation,
                      member_id=self.member_id, instance=self.instance)


def rejoin_asked(m: Member) -> bool:
    """Heartbeat once: whether the member is told to rejoin (anything but NONE or
    REBALANCE_IN_PROGRESS fails)."""
    code = m.heartbeat()
    assert code in (E.none, E.rebalance_in_progress), code
    return code is E.rebalance_in_progress


def assignment(m: Member) -> bytes:
    """What the leader assigns `m` in these tests (opaque to the coordinator)."""
    return f"assigned to {m.member_id}".encode()


def form_group(*members: Member) -> None:
    """Bring `members` into one Stable group, one newcomer at a time (each makes the others
    rejoin, as Kafka's addMemberAndRebalance does); the leader assigns `assignment(m)`."""
    for n, newcomer in enumerate(members, start=1):
        inside = members[:n]
        newcomer.start_join()
        for m in inside[:-1]:
            _until(functools.partial(rejoin_asked, m), f"{m.member_id} is asked to rejoin")
            m.start_join()
        answers = [m.joined() for m in inside]
        assert [a.error_code for a in answers] == [E.none] * n, answers
        assert len({a.generation_id for a in answers}) == 1, answers
        leader = next(m for m in inside if m.member_id == answers[0].leader)
        assert leader.sync({m.member_id: assignment(m) for m in inside}).error_code == E.none
        for m in inside:
            if m is not leader:
                assert m.sync().error_code == E.none


# ------------------------------------------------------------------ other requests


def commit(client: RawClient, group: str, offsets: Mapping[tuple[str, int], int], *,
           version: int = COMMIT_V, generation: int = -1, member_id: str = "",
           instance: str | None = None, leader_epoch: int = -1,
           metadata: str | Mapping[tuple[str, int], str] | None = ""
           ) -> dict[tuple[str, int], ErrorCode]:
    """OffsetCommit: the error of each partition (a "simple" commit by default); `metadata`
    for all partitions or per partition."""
    topics: dict[str, list[Any]] = {}
    for (topic, p), offset in offsets.items():
        topics.setdefault(topic, []).append(build(
            OFFSET_COMMIT, version, "OffsetCommitRequestPartition", partition_index=i32(p),
            committed_offset=i64(offset), committed_leader_epoch=i32(leader_epoch),
            committed_metadata=metadata if not isinstance(metadata, Mapping)
            else metadata[(topic, p)]))
    resp = client.call(OFFSET_COMMIT, version, build(
        OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=i32(generation),
        member_id=member_id, group_instance_id=instance,
        topics=tuple(build(OFFSET_COMMIT, version, "OffsetCommitRequestTopic", name=t,
                           partitions=tuple(ps)) for t, ps in topics.items())))
    return {(t.name, int(p.partition_index)): ErrorCode(p.error_code)
            for t in resp.topics for p in t.partitions}


def _wanted(version: int, entity: str,
            partitions: Sequence[tuple[str, int]] | None) -> tuple[Any, ...] | None:
    if partitions is None:
        return None
    topics: dict[str, list[int]] = {}
    for topic, p in partitions:
        topics.setdefault(topic, []).append(p)
    return tuple(build(OFFSET_FETCH, version, entity, name=t,
                       partition_indexes=tuple(i32(p) for p in ps))
                 for t, ps in topics.items())


def _offsets(topics: Sequence[Any]) -> Offsets:
    out: Offsets = {}
    for t in topics:
        for p in t.partitions:
            assert p.error_code == E.none, p
            out[(t.name, int(p.partition_index))] = (
                int(p.committed_offset), int(getattr(p, "committed_leader_epoch", -1)),
                p.metadata)
    return out


def fetch_offsets(client: RawClient, group: str,
                  partitions: Sequence[tuple[str, int]] | None,
                  version: int = FETCH_V) -> Offsets:
    """OffsetFetch (v1-v7) of some partitions, or (None, v2+) of all the group has."""
    resp = client.call(OFFSET_FETCH, version, build(
        OFFSET_FETCH, version, group_id=group,
        topics=_wanted(version, "OffsetFetchRequestTopic", partitions), require_stable=False))
    assert getattr(resp, "error_code", E.none) == E.none, resp
    return _offsets(resp.topics)


def describe(client: RawClient, *groups: str) -> list[Any]:
    resp = client.call(DESCRIBE_GROUPS, 5, build(DESCRIBE_GROUPS, 5, groups=groups,
                                                 include_authorized_operations=False))
    return list(resp.groups)


def members_of(client: RawClient, group: str) -> dict[str, tuple[bytes, bytes]]:
    """DescribeGroups: each member's (metadata, assignment)."""
    (g,) = describe(client, group)
    return {m.member_id: (m.member_metadata, m.member_assignment) for m in g.members}


def state_of(client: RawClient, group: str) -> str:
    (g,) = describe(client, group)
    assert g.error_code == E.none, g
    return str(g.group_state)


def listed(client: RawClient, *states: str) -> dict[str, str]:
    """ListGroups v4: group id -> state, filtered by `states`."""
    resp = client.call(LIST_GROUPS, 4, build(LIST_GROUPS, 4, states_filter=states))
    assert resp.error_code == E.none, resp
    return {g.group_id: g.group_state for g in resp.groups}


def leave(client: RawClient, group: str, members: Sequence[tuple[str, str | None]],
          version: int = LEAVE_V) -> Any:
    """LeaveGroup v3+ (a batch of (member id, instance id))."""
    return client.call(LEAVE_GROUP, version, build(
        LEAVE_GROUP, version, group_id=group,
        members=tuple(build(LEAVE_GROUP, version, "MemberIdentity", member_id=member_id,
                            group_instance_id=instance, reason=None)
                      for member_id, instance in members)))


def delete_groups(client: RawClient, *groups: str) -> dict[str, ErrorCode]:
    resp = client.call(DELETE_GROUPS, 2, build(DELETE_GROUPS, 2, groups_names=groups))
    return {r.group_id: ErrorCode(r.error_code) for r in resp.results}


def delete_offsets(client: RawClient, group: str, partitions: Sequence[tuple[str, int]]
                   ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    topics: dict[str, list[Any]] = {}
    for topic, p in partitions:
        topics.setdefault(topic, []).append(
            build(OFFSET_DELETE, 0, "OffsetDeleteRequestPartition", partition_index=i32(p)))
    resp = client.call(OFFSET_DELETE, 0, build(
        OFFSET_DELETE, 0, group_id=group,
        topics=tuple(build(OFFSET_DELETE, 0, "OffsetDeleteRequestTopic", name=t,
                           partitions=tuple(ps)) for t, ps in topics.items())))
    return ErrorCode(resp.error_code), {(t.name, int(p.partition_index)): ErrorCode(p.error_code)
                                        for t in resp.topics for p in t.partitions}


def find_coordinator(port: int, group: str) -> set[tuple[int, str, int]]:
    """The coordinator one agent names for `group`, by FindCoordinator v3 and v4 (the set
    has one element if both agree)."""
    client = RawClient(port)
    try:
        v3 = client.call(FIND_COORDINATOR, 3, build(FIND_COORDINATOR, 3, key=group,
                                                    key_type=i8(0)))
        (v4,) = client.call(FIND_COORDINATOR, 4, build(
            FIND_COORDINATOR, 4, key_type=i8(0), coordinator_keys=(group,))).coordinators
    finally:
        client.close()
    assert v3.error_code == v4.error_code == E.none, (v3, v4)
    return {(int(r.node_id), r.host, int(r.port)) for r in (v3, v4)}


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """One agent (file + SQLite) for the module, registered, with topics `t` and `u`; each
    test uses its own group ids."""
    tmp = tmp_path_factory.mktemp("groups")
    backend = Backend(f"file://{tmp}/objects", f"sqlite:///{tmp}/md.db", tmp)
    md = backend.metadata()
    try:
        md.create_topic(TOPIC, PARTITIONS)
        md.create_topic(OTHER_TOPIC, 1)
        proc = backend.agent("agent", GROUP_ENV).start()
        _wait_live(md, {proc.port})  # a group's first request needs the agent's registry id
    finally:
        md.close()
    yield proc
    proc.terminate()


@pytest.fixture
def connect(agent: AgentProcess) -> Iterator[Connect]:
    """Open connections to the agent (closed after the test)."""
    opened: list[RawClient] = []

    def open_one() -> RawClient:
        opened.append(RawClient(agent.port))
        return opened[-1]

    yield open_one
    for c in opened:
        c.close()


def members(connect: Connect, group: str, n: int, **kw: Any) -> list[Member]:
    return [Member(connect(), group, **kw) for _ in range(n)]


# ------------------------------------------------------------------ JoinGroup, SyncGroup, Heartbeat


def test_join_handshake_leader_rebalance_and_sync(connect: Connect) -> None:
    a, b = members(connect, "g-join", 2)
    # v4+: a new member without id gets one with MEMBER_ID_REQUIRED (doDynamicNewMemberJoinGroup)
    first = a.client.call(JOIN_GROUP, JOIN_V, a.join_request(JOIN_V))
    assert (first.error_code, first.generation_id, first.leader, first.members) == \
        (E.member_id_required, -1, "", ())
    assert first.member_id.startswith("raw-")  # clientId-UUID, as Kafka's generateMemberId
    a.member_id = first.member_id
    # ... and joins with it: generation 1, it leads and alone gets the members' metadata
    resp = a.join()
    assert (resp.error_code, resp.generation_id, resp.member_id, resp.leader) == \
        (E.none, 1, first.member_id, first.member_id)
    assert (resp.protocol_type, resp.protocol_name) == ("consumer", RANGE)
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in resp.members] == \
        [(a.member_id, None, subscription(TOPIC))]
    synced = a.sync({a.member_id: b"a1"})
    assert (synced.error_code, synced.protocol_type, synced.protocol_name, synced.assignment) \
        == (E.none, "consumer", RANGE, b"a1")
    assert a.heartbeat() == E.none
    assert state_of(a.client, "g-join") == "Stable"

    # A second member: the group prepares a rebalance; the first hears of it on Heartbeat
    b.start_join()
    _until(functools.partial(rejoin_asked, a), "the first member is asked to rejoin")
    assert state_of(a.client, "g-join") == "PreparingRebalance"
    resp_a = a.join()
    resp_b = b.joined()
    assert (resp_a.error_code, resp_b.error_code) == (E.none, E.none)
    assert resp_a.generation_id == resp_b.generation_id == 2
    assert resp_a.leader == resp_b.leader == a.member_id
    assert {m.member_id for m in resp_a.members} == {a.member_id, b.member_id}
    assert resp_b.members == ()  # followers get no member list
    assert a.heartbeat() == E.none  # CompletingRebalance: heartbeats are fine
    assert state_of(a.client, "g-join") == "CompletingRebalance"

    # The follower's SyncGroup waits for the leader's assignment
    b.start_sync()
    assert not answered(b.client)
    assert a.sync({a.member_id: b"a2", b.member_id: b"b2"}).assignment == b"a2"
    got = b.synced()
    assert (got.error_code, got.protocol_type, got.protocol_name, got.assignment) == \
        (E.none, "consumer", RANGE, b"b2")
    assert state_of(a.client, "g-join") == "Stable"
    assert (a.heartbeat(), b.heartbeat()) == (E.none, E.none)
    # a SyncGroup of a Stable group answers the member's assignment again
    assert b.sync().assignment == b"b2"


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_join_before_v4_needs_no_member_id_round(connect: Connect, version: int) -> None:
    (m,) = members(connect, f"g-join-v{version}", 1)
    resp = m.join(version)  # v0-v3: a member id at once (requireKnownMemberId = version >= 4)
    assert (resp.error_code, resp.generation_id, resp.leader) == (E.none, 1, resp.member_id)
    assert resp.member_id
    assert [x.member_id for x in resp.members] == [resp.member_id]
    assert m.sync({m.member_id: b"x"}, version=min(version, 3)).assignment == b"x"
    assert m.heartbeat(version=min(version, 3)) == E.none


def test_join_rejections(connect: Connect) -> None:
    (m,) = members(connect, "g-join-bad", 1)
    form_group(m)

    def join_error(**changes: Any) -> ErrorCode:
        other = dataclasses.replace(m, **{"member_id": "", "generation": -1, **changes})
        resp = other.client.call(JOIN_GROUP, JOIN_V, other.join_request(JOIN_V))
        return ErrorCode(resp.error_code)

    # handleJoinGroup: the group id is checked first, then the session timeout's bounds
    assert join_error(group="") == E.invalid_group_id
    assert join_error(group="", session_ms=1) == E.invalid_group_id
    assert join_error(session_ms=MIN_SESSION_MS - 1) == E.invalid_session_timeout
    assert join_error(session_ms=MAX_SESSION_MS + 1) == E.invalid_session_timeout
    # GroupMetadata.supportsProtocols: a non-empty group takes only its protocol type and a
    # protocol all members support; an empty group takes any non-empty type and list
    assert join_error(protocol_type="connect") == E.inconsistent_group_protocol
    assert join_error(protocols=(("roundrobin", b""),)) == E.inconsistent_group_protocol
    assert join_error(group="g-join-bad-empty", protocol_type="") == \
        E.inconsistent_group_protocol
    assert join_error(group="g-join-bad-empty", protocols=()) == E.inconsistent_group_protocol
    # doCurrentMemberJoinGroup/validateCurrentMember: an id the group does not know
    assert join_error(member_id="nobody") == E.unknown_member_id
    # none of it disturbed the group
    assert m.heartbeat() == E.none
    assert state_of(m.client, "g-join-bad") == "Stable"


def test_heartbeat_and_sync_errors(connect: Connect) -> None:
    a, b = members(connect, "g-errors", 2)
    form_group(a)
    # validateHeartbeat: member first (UNKNOWN_MEMBER_ID), then generation (ILLEGAL_GENERATION)
    assert a.heartbeat(generation=a.generation + 1) == E.illegal_generation
    assert a.heartbeat(generation=0) == E.illegal_generation
    assert a.heartbeat(member_id="nobody") == E.unknown_member_id
    assert a.heartbeat(member_id="nobody", generation=99) == E.unknown_member_id
    # handleHeartbeat: a group that does not exist knows no member
    assert dataclasses.replace(a, group="g-errors-none").heartbeat() == E.unknown_member_id
    # validateSyncGroup: the same order, then the protocol (v5) must be the group's
    assert a.sync(generation=a.generation + 1).error_code == E.illegal_generation
    assert dataclasses.replace(a, member_id="nobody").sync().error_code == E.unknown_member_id
    assert a.sync(protocol_name="roundrobin").error_code == E.inconsistent_group_protocol

    # PreparingRebalance (a newcomer waits, the member has not rejoined): doSyncGroup answers
    # REBALANCE_IN_PROGRESS, as does the heartbeat; an offset commit is still taken
    b.start_join()
    _until(functools.partial(rejoin_asked, a), "the member is asked to rejoin")
    assert a.sync().error_code == E.rebalance_in_progress
    assert a.commit({(TOPIC, 0): 1}) == {(TOPIC, 0): E.none}
    a.join()
    b.joined()
    # CompletingRebalance: doCommitOffsets refuses commits with REBALANCE_IN_PROGRESS
    assert a.commit({(TOPIC, 0): 2}) == {(TOPIC, 0): E.rebalance_in_progress}
    # the old generation is now illegal
    assert a.heartbeat(generation=a.generation - 1) == E.illegal_generation
    assert a.sync(generation=a.generation - 1).error_code == E.illegal_generation


# Session expiry and members waiting in JoinGroup/SyncGroup past their session
# (MemberMetadata.hasSatisfiedHeartbeat) are tested on a ManualClock, without sleeping, in
# tests/agent/test_group_coordinator.py and test_group_transitions.py.


# ------------------------------------------------------------------ static membership


def test_static_member_rejoining_with_a_new_id_fences_the_old_one(connect: Connect) -> None:
    static = Member(connect(), "g-static", instance="s1")
    follower = Member(connect(), "g-static")
    form_group(static, follower)  # the static member leads
    generation = static.generation
    # a static member joins with its instance id and no member id (v5+): no
    # MEMBER_ID_REQUIRED round; in Stable with unchanged protocols it replaces the old
    # member under a new id without a rebalance (updateStaticMemberAndRebalance); from v9
    # the leader is told to skip the assignment (KIP-814)
    again = Member(connect(), "g-static", instance="s1")
    resp = again.join()
    assert resp.error_code == E.none
    assert resp.member_id not in ("", static.member_id)
    assert (resp.generation_id, resp.leader, resp.skip_assignment) == \
        (generation, resp.member_id, True)
    assert {m.member_id for m in resp.members} == {resp.member_id, follower.member_id}
    assert state_of(again.client, "g-static") == "Stable"
    assert follower.heartbeat() == E.none  # no rebalance
    assert again.heartbeat() == E.none
    synced = again.sync()  # Stable: the old member's assignment, carried over
    assert (synced.error_code, synced.assignment) == (E.none, assignment(static))
    assert set(members_of(again.client, "g-static")) == {again.member_id, follower.member_id}

    # the old member id with the instance id: FENCED_INSTANCE_ID (validateCurrentMember)
    assert static.heartbeat() == E.fenced_instance_id
    assert static.sync().error_code == E.fenced_instance_id
    assert static.commit({(TOPIC, 0): 1}) == {(TOPIC, 0): E.fenced_instance_id}
    assert static.client.call(JOIN_GROUP, JOIN_V, static.join_request(JOIN_V)).error_code \
        == E.fenced_instance_id
    assert leave(static.client, "g-static", [(static.member_id, "s1")]).members[0] \
        .error_code == E.fenced_instance_id
    # without the instance id (Heartbeat v0-v2) the old id is merely unknown
    assert static.heartbeat(version=2) == E.unknown_member_id
    assert (again.heartbeat(), follower.heartbeat()) == (E.none, E.none)


# ------------------------------------------------------------------ LeaveGroup


def test_leave_group_v0(connect: Connect) -> None:
    (m,) = members(connect, "g-leave-v0", 1)
    form_group(m)
    request = build(LEAVE_GROUP, 0, group_id="g-leave-v0", member_id=m.member_id)
    assert m.client.call(LEAVE_GROUP, 0, request).error_code == E.none
    assert (state_of(m.client, "g-leave-v0"), members_of(m.client, "g-leave-v0")) == \
        ("Empty", {})
    # before v3 the single member's error is the response's (LeaveGroupResponse.getError)
    assert m.client.call(LEAVE_GROUP, 0, request).error_code == E.unknown_member_id


@pytest.mark.parametrize("version", [3, 5])
def test_leave_group_batch(connect: Connect, version: int) -> None:
    group = f"g-leave-v{version}"
    static = Member(connect(), group, instance="s1")
    dynamic = Member(connect(), group)
    form_group(static, dynamic)
    batch = [(dynamic.member_id, None), ("nobody", None), ("", "s1"), ("", "ghost")]
    resp = leave(static.client, group, batch, version)
    # handleLeaveGroup: per-member errors; an empty member id leaves by instance id
    assert resp.error_code == E.none
    assert [(r.member_id, r.group_instance_id, r.error_code) for r in resp.members] == [
        (dynamic.member_id, None, E.none), ("nobody", None, E.unknown_member_id),
        ("", "s1", E.none), ("", "ghost", E.unknown_member_id)]
    assert (state_of(static.client, group), members_of(static.client, group)) == ("Empty", {})
    assert dynamic.heartbeat() == E.unknown_member_id


# ------------------------------------------------------------------ offsets


def test_offset_commit_errors(connect: Connect) -> None:
    client = connect()
    # a "simple" commit (generation -1, no member) creates the group (handleCommitOffsets);
    # the partitions are checked one by one (KafkaApis: UNKNOWN_TOPIC_OR_PARTITION) and a
    # metadata over offset.metadata.max.bytes is refused for its partition only
    # (GroupMetadataManager.storeOffsets / validateOffsetMetadataLength)
    assert commit(client, "g-commit-simple", {(TOPIC, 0): 5, (TOPIC, 9): 5, ("missing", 0): 5},
                  metadata="m") == {(TOPIC, 0): E.none, (TOPIC, 9): E.unknown_topic_or_partition,
                                    ("missing", 0): E.unknown_topic_or_partition}
    longest = "x" * METADATA_MAX_BYTES
    assert commit(client, "g-commit-simple", {(TOPIC, 1): 7}, metadata=longest) == \
        {(TOPIC, 1): E.none}
    assert commit(client, "g-commit-simple", {(TOPIC, 1): 8, (TOPIC, 0): 6},
                  metadata={(TOPIC, 1): longest + "x", (TOPIC, 0): "m"}) == \
        {(TOPIC, 1): E.offset_metadata_too_large, (TOPIC, 0): E.none}
    got = fetch_offsets(client, "g-commit-simple", [(TOPIC, 0), (TOPIC, 1)])
    assert got == {(TOPIC, 0): (6, -1, "m"), (TOPIC, 1): (7, -1, longest)}

    # a group with members takes commits from its members only (validateOffsetCommit)
    (m,) = members(connect, "g-commit-members", 1)
    form_group(m)
    assert commit(client, "g-commit-members", {(TOPIC, 0): 1, (TOPIC, 1): 1}) == \
        {(TOPIC, 0): E.unknown_member_id, (TOPIC, 1): E.unknown_member_id}
    assert commit(client, "g-commit-members", {(TOPIC, 0): 1}, generation=m.generation,
                  member_id="nobody") == {(TOPIC, 0): E.unknown_member_id}
    assert m.commit({(TOPIC, 0): 1}, generation=m.generation + 1) == \
        {(TOPIC, 0): E.illegal_generation}
    assert m.commit({(TOPIC, 0): 1}, generation=0) == {(TOPIC, 0): E.illegal_generation}
    assert m.commit({(TOPIC, 0): 11, (TOPIC, 7): 11}) == \
        {(TOPIC, 0): E.none, (TOPIC, 7): E.unknown_topic_or_partition}
    assert m.commit({(TOPIC, 1): 12}, version=2) == {(TOPIC, 1): E.none}  # v2: no epoch
    assert fetch_offsets(client, "g-commit-members", [(TOPIC, 0), (TOPIC, 1)]) == \
        {(TOPIC, 0): (11, -1, ""), (TOPIC, 1): (12, -1, "")}
    assert m.heartbeat() == E.none


def test_offset_fetch_versions(connect: Connect) -> None:
    client = connect()
    assert commit(client, "g-fetch", {(TOPIC, 0): 42}, leader_epoch=3, metadata="meta") == \
        {(TOPIC, 0): E.none}
    assert commit(client, "g-fetch", {(OTHER_TOPIC, 0): 7}, version=2) == \
        {(OTHER_TOPIC, 0): E.none}
    assert commit(client, "g-fetch-2", {(TOPIC, 1): 9}) == {(TOPIC, 1): E.none}
    # v5+: the leader epoch and metadata round-trip; an uncommitted partition is offset -1,
    # epoch -1, metadata "" (GroupMetadataManager.getOffsets: INVALID_OFFSET, NO_METADATA)
    assert fetch_offsets(client, "g-fetch", [(TOPIC, 0), (TOPIC, 1)], version=5) == \
        {(TOPIC, 0): (42, 3, "meta"), (TOPIC, 1): (-1, -1, "")}
    # v1: explicit topics, no epoch in the answer
    assert fetch_offsets(client, "g-fetch", [(TOPIC, 0), (TOPIC, 1)], version=1) == \
        {(TOPIC, 0): (42, -1, "meta"), (TOPIC, 1): (-1, -1, "")}
    # v2+: topics null asks for everything the group has
    everything = {(TOPIC, 0): (42, 3, "meta"), (OTHER_TOPIC, 0): (7, -1, "")}
    assert fetch_offsets(client, "g-fetch", None, version=7) == everything
    assert fetch_offsets(client, "g-fetch", None, version=2) == \
        {k: (o, -1, md) for k, (o, _, md) in everything.items()}
    assert fetch_offsets(client, "g-fetch-none", None) == {}
    # v8+: several groups in one request
    resp = client.call(OFFSET_FETCH, 8, build(OFFSET_FETCH, 8, require_stable=False, groups=(
        build(OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id="g-fetch", topics=None),
        build(OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id="g-fetch-2",
              topics=_wanted(8, "OffsetFetchRequestTopics", [(TOPIC, 0), (TOPIC, 1)])),
        build(OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id="g-fetch-none",
              topics=_wanted(8, "OffsetFetchRequestTopics", [(TOPIC, 0)])))))
    assert [(g.group_id, g.error_code) for g in resp.groups] == \
        [("g-fetch", E.none), ("g-fetch-2", E.none), ("g-fetch-none", E.none)]
    assert [_offsets(g.topics) for g in resp.groups] == [
        everything, {(TOPIC, 0): (-1, -1, ""), (TOPIC, 1): (9, -1, "")},
        {(TOPIC, 0): (-1, -1, "")}]


# ------------------------------------------------------------------ admin APIs


def test_describe_and_list_groups(agent: AgentProcess, connect: Connect) -> None:
    a, b = members(connect, "g-describe", 2)
    form_group(a, b)
    (g, dead) = describe(a.client, "g-describe", "g-describe-none")
    # GroupMetadata.summary: Stable shows the protocol and each member's metadata and
    # assignment; an unknown group is Dead with error NONE (handleDescribeGroup, v0-v5)
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == \
        (E.none, "Stable", "consumer", RANGE)
    assert {m.member_id: (m.group_instance_id, m.client_id, m.client_host, m.member_metadata,
                          m.member_assignment) for m in g.members} == {
        m.member_id: (None, "raw", "/127.0.0.1", subscription(TOPIC), assignment(m))
        for m in (a, b)}
    assert (dead.error_code, dead.group_state, dead.protocol_type, dead.protocol_data,
            dead.members) == (E.none, "Dead", "", "", ())
    # another state: no protocol, members without metadata (summaryNoMetadata)
    c = Member(connect(), "g-describe")
    c.start_join()
    (g,) = describe(a.client, "g-describe")
    assert (g.group_state, g.protocol_data) == ("PreparingRebalance", "")
    assert {m.member_id: (m.member_metadata, m.member_assignment) for m in g.members} == \
        {m.member_id: (b"", b"") for m in (a, b, c)}

    # an Empty group next to it, for ListGroups' states filter (case-insensitive)
    (e,) = members(connect, "g-list-empty", 1)
    form_group(e)
    assert leave(e.client, "g-list-empty", [(e.member_id, None)]).error_code == E.none
    everything = listed(a.client)
    assert everything["g-describe"] == "PreparingRebalance"
    assert everything["g-list-empty"] == "Empty"
    empty = listed(a.client, "Empty")
    assert "g-list-empty" in empty and "g-describe" not in empty
    assert set(empty.values()) == {"Empty"}
    rebalancing = listed(a.client, "preparingrebalance", "Dead")
    assert "g-describe" in rebalancing and "g-list-empty" not in rebalancing
    assert set(rebalancing.values()) == {"PreparingRebalance"}
    # v5 (KIP-848): every group is "classic"; a types filter without it lists none
    for types, expected in [((), True), (("Classic",), True), (("consumer", "CLASSIC"), True),
                            (("consumer",), False), (("share", "bogus"), False)]:
        resp = a.client.call(LIST_GROUPS, 5, build(LIST_GROUPS, 5, states_filter=("Empty",),
                                                   types_filter=types))
        assert resp.error_code == E.none, resp
        got = {g.group_id: (g.group_state, g.group_type) for g in resp.groups}
        assert (got.get("g-list-empty") == ("Empty", "classic")) is expected, (types, got)
        assert "g-describe" not in got
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    for wanted, expected in [(set(), True), ({ConsumerGroupType.CLASSIC}, True),
                            ({ConsumerGroupType.CONSUMER}, False)]:
        result = admin.list_consumer_groups(types=wanted).result(60)
        assert result.errors == []
        got_types = {g.group_id: g.type for g in result.valid}
        assert (got_types.get("g-list-empty") == ConsumerGroupType.CLASSIC) is expected, \
            (wanted, got_types)
    for m in (a, b):
        assert rejoin_asked(m)
        m.start_join()
    assert [m.joined().error_code for m in (a, b, c)] == [E.none] * 3


def test_delete_groups(connect: Connect) -> None:
    (m,) = members(connect, "g-delete", 1)
    form_group(m)
    assert m.commit({(TOPIC, 0): 3}) == {(TOPIC, 0): E.none}
    # handleDeleteGroups: NON_EMPTY_GROUP while it has members, then NONE, then
    # GROUP_ID_NOT_FOUND (groupNotExists)
    assert delete_groups(m.client, "g-delete", "g-delete-never") == \
        {"g-delete": E.non_empty_group, "g-delete-never": E.group_id_not_found}
    assert leave(m.client, "g-delete", [(m.member_id, None)]).members[0].error_code == E.none
    assert delete_groups(m.client, "g-delete") == {"g-delete": E.none}
    # its offsets went with it; it is described as Dead
    assert fetch_offsets(m.client, "g-delete", [(TOPIC, 0)]) == {(TOPIC, 0): (-1, -1, "")}
    assert state_of(m.client, "g-delete") == "Dead"
    assert delete_groups(m.client, "g-delete") == {"g-delete": E.group_id_not_found}
    # a simple consumer's group (offsets only) is deleted too
    assert commit(m.client, "g-delete-simple", {(TOPIC, 0): 1}) == {(TOPIC, 0): E.none}
    assert delete_groups(m.client, "g-delete-simple") == {"g-delete-simple": E.none}
    assert fetch_offsets(m.client, "g-delete-simple", None) == {}


def test_offset_delete(connect: Connect) -> None:
    (m,) = members(connect, "g-offset-delete", 1)  # subscribed to `t` only
    form_group(m)
    assert m.commit({(TOPIC, 0): 5, (OTHER_TOPIC, 0): 6}) == \
        {(TOPIC, 0): E.none, (OTHER_TOPIC, 0): E.none}
    # handleDeleteOffsets: a consumer group's subscribed topics are refused per partition
    # (GroupMetadata.isSubscribedToTopic, from the members' ConsumerProtocolSubscription)
    assert delete_offsets(m.client, "g-offset-delete", [(TOPIC, 0), (OTHER_TOPIC, 0)]) == \
        (E.none, {(TOPIC, 0): E.group_subscribed_to_topic, (OTHER_TOPIC, 0): E.none})
    assert fetch_offsets(m.client, "g-offset-delete", None) == {(TOPIC, 0): (5, -1, "")}
    # an Empty group's offsets all go
    assert leave(m.client, "g-offset-delete", [(m.member_id, None)]).error_code == E.none
    assert delete_offsets(m.client, "g-offset-delete", [(TOPIC, 0)]) == \
        (E.none, {(TOPIC, 0): E.none})
    assert fetch_offsets(m.client, "g-offset-delete", None) == {}


# ------------------------------------------------------------------ two agents


@pytest.fixture
def two_group_agents(tmp_path: Path) -> Iterator[tuple[AgentProcess, AgentProcess]]:
    """Two agents (file + SQLite) on one store and metadata store, both registered."""
    backend = Backend(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db", tmp_path)
    md = backend.metadata()
    md.create_topic(TOPIC, PARTITIONS)
    procs: list[AgentProcess] = []
    try:
        for name in ("agent0", "agent1"):
            procs.append(backend.agent(name, GROUP_ENV).start())
        _wait_live(md, {p.port for p in procs})
        yield procs[0], procs[1]
    finally:
        md.close()
        for p in procs:
            p.terminate()


def test_one_coordinator_per_group_across_agents(
        two_group_agents: tuple[AgentProcess, AgentProcess]) -> None:
    agents = two_group_agents
    group = "g-two-agents"
    (named,) = find_coordinator(agents[0].port, group) | find_coordinator(agents[1].port, group)
    coordinator = next(a for a in agents if a.port == named[2])
    other = next(a for a in agents if a is not coordinator)
    member = Member(RawClient(coordinator.port), group)
    stray = RawClient(other.port)
    try:
        form_group(member)
        assert member.commit({(TOPIC, 0): 4}) == {(TOPIC, 0): E.none}
        # every group request at the other agent: NOT_COORDINATOR (validateGroupStatus)
        there = dataclasses.replace(member, client=stray)
        newcomer = Member(stray, group)
        assert stray.call(JOIN_GROUP, JOIN_V, newcomer.join_request(JOIN_V)).error_code == \
            E.not_coordinator
        assert stray.call(JOIN_GROUP, JOIN_V, there.join_request(JOIN_V)).error_code == \
            E.not_coordinator
        assert there.heartbeat() == E.not_coordinator
        assert there.sync().error_code == E.not_coordinator
        assert there.commit({(TOPIC, 0): 5}) == {(TOPIC, 0): E.not_coordinator}
        assert leave(stray, group, [(member.member_id, None)]).error_code == E.not_coordinator
        (described,) = describe(stray, group)
        assert described.error_code == E.not_coordinator
        assert delete_groups(stray, group) == {group: E.not_coordinator}
        assert delete_offsets(stray, group, [(TOPIC, 0)])[0] == E.not_coordinator
        # the member is untouched, and both agents still name its coordinator
        assert member.heartbeat() == E.none
        assert find_coordinator(other.port, group) == {named}
        # by design (groups-design.md) any agent answers OffsetFetch from the store
        assert fetch_offsets(stray, group, [(TOPIC, 0)]) == {(TOPIC, 0): (4, -1, "")}
    finally:
        member.client.close()
        stray.close()


# ------------------------------------------------------------------ where the agent differs


def test_static_rejoin_before_v9_keeps_the_old_leader_id_as_kafka(connect: Connect) -> None:
    """updateStaticMemberAndRebalance without supportSkippingAssignment (JoinGroup < v9):
    the answer names the old leader id and no members, so the rejoined leader does not
    compute an assignment the Stable group would ignore."""
    static = Member(connect(), "g-static-v5", instance="s5")
    form_group(static)
    resp = Member(connect(), "g-static-v5", instance="s5").join(version=5)
    assert (resp.error_code, resp.generation_id) == (E.none, static.generation)
    assert (resp.leader, resp.members) == (static.member_id, ())


def test_edge_answers_as_kafka(connect: Connect) -> None:
    """Answers where the agent differs from Kafka's classic coordinator, gathered so that
    one run shows every difference (request -> Kafka's answer, with its source)."""
    client = connect()
    # an Empty group (a member joined and left) for the commit below
    (m,) = members(connect, "g-edge-empty", 1)
    form_group(m)
    assert leave(m.client, "g-edge-empty", [(m.member_id, None)]).error_code == E.none
    # a consumer group whose member's subscription does not parse
    garbled = Member(connect(), "g-edge-garbled", protocols=((RANGE, b"garbage"),))
    form_group(garbled)
    assert garbled.commit({(OTHER_TOPIC, 0): 1}) == {(OTHER_TOPIC, 0): E.none}
    first = client.call(JOIN_GROUP, JOIN_V, Member(client, "g-edge-join").join_request(JOIN_V))
    # requests for groups that do not exist
    assert delete_groups(client, "g-edge-none-3") == {"g-edge-none-3": E.group_id_not_found}
    assert Member(client, "g-edge-none-4", member_id="m", generation=1).heartbeat() == \
        E.unknown_member_id

    got = {
        # handleCommitOffsets: no such group and generation >= 0 -> ILLEGAL_GENERATION
        "OffsetCommit v8 generation 1 member 'm' to a group that does not exist":
            commit(client, "g-edge-none-1", {(TOPIC, 0): 1}, version=8, generation=1,
                   member_id="m")[(TOPIC, 0)],
        # handleDeleteOffsets: no such group -> GROUP_ID_NOT_FOUND (groupNotExists)
        "OffsetDelete of a group that does not exist":
            delete_offsets(client, "g-edge-none-2", [(TOPIC, 0)])[0],
        # validateOffsetCommit (3.x; also ClassicGroup.validateOffsetCommit of the new
        # coordinator): generation < 0 into an Empty group is accepted whatever member id
        "OffsetCommit generation -1 member 'x' into an Empty group":
            commit(client, "g-edge-empty", {(TOPIC, 0): 1}, member_id="x")[(TOPIC, 0)],
        # GroupMetadata.isSubscribedToTopic: subscriptions that do not parse count as
        # subscribed to every topic
        "OffsetDelete of a topic in a consumer group whose subscription does not parse":
            delete_offsets(client, "g-edge-garbled", [(OTHER_TOPIC, 0)])[1]
            .get((OTHER_TOPIC, 0)),
        # KafkaApis.handleJoinGroupRequest: v7+ error answers carry protocol_name null
        "JoinGroup v9 MEMBER_ID_REQUIRED answer's protocol_name": first.protocol_name,
        # handleDeleteGroups and handleHeartbeat leave a group that does not exist
        # (getGroup: None) as it was: Dead to DescribeGroups, absent from ListGroups
        "DescribeGroups after a DeleteGroups of a group that does not exist":
            state_of(client, "g-edge-none-3"),
        "ListGroups lists a group that was only sent a Heartbeat":
            "g-edge-none-4" in listed(client),
    }
    assert got == {
        "OffsetCommit v8 generation 1 member 'm' to a group that does not exist":
            E.illegal_generation,
        "OffsetDelete of a group that does not exist": E.group_id_not_found,
        "OffsetCommit generation -1 member 'x' into an Empty group": E.none,
        "OffsetDelete of a topic in a consumer group whose subscription does not parse":
            E.group_subscribed_to_topic,
        "JoinGroup v9 MEMBER_ID_REQUIRED answer's protocol_name": None,
        "DescribeGroups after a DeleteGroups of a group that does not exist": "Dead",
        "ListGroups lists a group that was only sent a Heartbeat": False,
    }


def test_stopping_agent_answers_waiting_members_as_kafka(tmp_path: Path) -> None:
    """A stopping agent answers the JoinGroups waiting in a rebalance NOT_COORDINATOR at
    once, as Kafka's onGroupUnloaded does when a controlled shutdown moves the group away,
    so members look for the coordinator again instead of waiting for the rebalance's end
    or the connection's abort at the agent's shutdown grace."""
    backend = Backend(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db", tmp_path)
    md = backend.metadata()
    md.create_topic(TOPIC, 1)
    proc = backend.agent("agent", GROUP_ENV).start()
    first = Member(RawClient(proc.port), "g-stopping")
    waiting = Member(RawClient(proc.port, timeout=ANSWER_S), "g-stopping")
    try:
        _wait_live(md, {proc.port})
        form_group(first)
        waiting.start_join()  # waits for `first` to rejoin (LONG_MS at most)
        _until(functools.partial(rejoin_asked, first), "the member is asked to rejoin")
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGTERM)
        assert waiting.joined().error_code == E.not_coordinator
    finally:
        first.client.close()
        waiting.client.close()
        md.close()
        proc.terminate(signal.SIGKILL)
