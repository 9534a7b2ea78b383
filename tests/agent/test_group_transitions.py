"""The classic group protocol's transitions (agent/groups/transitions.py), pure: a group, an
event and a time in, a group and effects out; no loop, no sockets, no sleeping. Time is a
ManualClock's epoch ms, moved by the test. The reference is Kafka's GroupCoordinator.scala
(3.x) and ClassicGroup (see tests/protocol/test_groups_raw.py for the same rules on the
wire)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from kio.schema.errors import ErrorCode

from agent.groups.group import (
    GROUP_COMPLETING_REBALANCE,
    GROUP_DEAD,
    GROUP_EMPTY,
    GROUP_PREPARING_REBALANCE,
    GROUP_STABLE,
    Group,
    JoinResult,
    SyncResult,
)
from agent.groups.transitions import (
    AssignmentNotStored,
    CommitCheck,
    Drop,
    Effect,
    Event,
    Heartbeat,
    Join,
    JoinNotStored,
    JoinRequest,
    Leave,
    Reply,
    Store,
    Sync,
    Tick,
    step,
)
from clock import ManualClock
from metadata import GroupLease, GroupMember

E = ErrorCode
SESSION_MS, REBALANCE_MS = 10_000, 30_000


class World:
    """One group driven by events at a ManualClock's time; answers by token."""

    def __init__(self, delay_ms: int = 0) -> None:
        self.clock = ManualClock()
        self.g = Group("g", GroupLease("g", "a", 1))
        self.delay_ms = delay_ms
        self.answers: dict[int, object] = {}
        self.stores: list[Store] = []
        self._tokens: Iterator[int] = itertools.count(1)
        self._ids: Iterator[int] = itertools.count(1)

    def token(self) -> int:
        return next(self._tokens)

    def do(self, event: Event) -> list[Effect]:
        before = self.g
        self.g, effects = step(self.g, event, self.clock.now_ms())
        assert self.g is not before  # a copy: the input is left as it was
        for e in effects:
            if isinstance(e, Reply):
                assert e.token not in self.answers, e  # each request is answered once
                self.answers[e.token] = e.result
            elif isinstance(e, Store):
                self.stores.append(e)
        return effects

    def join(self, member_id: str = "", *, instance: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, require_id: bool = False,
             session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS,
             skip: bool = False) -> int:
        token = self.token()
        who = GroupMember(member_id, instance, "c", "/127.0.0.1", rebalance_ms, session_ms)
        req = JoinRequest("g", who, "consumer", protocols or [("range", b"m")], require_id,
                          skip)
        self.do(Join(token, req, f"c-{next(self._ids)}", self.delay_ms))
        return token

    def sync(self, member_id: str, generation: int | None = None,
             assignments: dict[str, bytes] | None = None, instance: str | None = None) -> int:
        token = self.token()
        self.do(Sync(token, self.g.generation if generation is None else generation,
                     member_id, instance, None, None, tuple((assignments or {}).items())))
        return token

    def heartbeat(self, member_id: str, generation: int | None = None,
                  instance: str | None = None) -> object:
        token = self.token()
        self.do(Heartbeat(token, self.g.generation if generation is None else generation,
                          member_id, instance))
        return self.answers[token]

    def leave(self, *members: tuple[str, str | None]) -> object:
        token = self.token()
        self.do(Leave(token, members))
        return self.answers[token]

    def commit(self, member_id: str, generation: int, instance: str | None = None) -> object:
        token = self.token()
        self.do(CommitCheck(token, generation, member_id, instance))
        return self.answers[token]

    def advance(self, ms: int) -> None:
        """Move time and fire what is due, as the runner's alarm does."""
        self.clock.advance(ms)
        due = self.g.next_deadline()
        if due is not None and due <= self.clock.now_ms():
            self.do(Tick())

    def answer(self, token: int) -> object:
        return self.answers.get(token)

    def joined(self, token: int) -> JoinResult:
        got = self.answers[token]
        assert isinstance(got, JoinResult), got
        return got

    def synced(self, token: int) -> SyncResult:
        got = self.answers[token]
        assert isinstance(got, SyncResult), got
        return got


def stable(w: World, n: int) -> list[str]:
    """`n` members joined (one join each, the group waiting for all) and synced: Stable."""
    tokens = [w.join()]
    first = w.joined(tokens[0]).member_id
    w.synced(w.sync(first, assignments={first: b"a-" + first.encode()}))
    ids = [first]
    for _ in range(n - 1):
        t = w.join()
        rejoin = [w.join(m) for m in ids]
        new = w.joined(t).member_id
        assert all(w.joined(r).error is E.none for r in rejoin)
        ids.append(new)
        leader = w.joined(t).leader
        w.sync(leader, assignments={m: b"a-" + m.encode() for m in ids})
        for m in ids:
            if m != leader:
                assert w.synced(w.sync(m)).error is E.none
    assert w.g.state == GROUP_STABLE
    return ids


def test_first_join_stores_the_group_before_it_rebalances() -> None:
    w = World()
    t = w.join()
    assert w.stores[0].awaited and w.stores[0].record.state == GROUP_PREPARING_REBALANCE
    assert isinstance(w.stores[0].failure, JoinNotStored)
    got = w.joined(t)
    assert (got.error, got.generation, got.leader) == (E.none, 1, got.member_id)
    assert got.members == ((got.member_id, None, b"m"),)
    assert w.g.state == GROUP_COMPLETING_REBALANCE


def test_member_id_required_then_join_and_the_unused_id_expires() -> None:
    w = World()
    t = w.join(require_id=True)
    first = w.joined(t)
    assert (first.error, first.member_id) == (E.member_id_required, "c-1")
    assert w.g.state == GROUP_EMPTY and "c-1" in w.g.pending
    assert w.joined(w.join("c-1", require_id=True)).error is E.none
    # another id handed out and never used expires with the session it asked for
    w.sync("c-1", assignments={"c-1": b"x"})
    unused = w.joined(w.join(require_id=True)).member_id
    assert unused in w.g.pending
    w.advance(SESSION_MS - 1)
    assert unused in w.g.pending
    w.advance(1)
    assert unused not in w.g.pending


def test_follower_sync_waits_for_the_leader_then_stable() -> None:
    w = World()
    a, b = stable(w, 2)
    assert w.g.generation == 2
    t_a, t_b = w.join(a), w.join(b)
    assert w.g.state == GROUP_COMPLETING_REBALANCE and w.g.generation == 3
    assert w.joined(t_a).members and not w.joined(t_b).members
    follower = w.sync(b)
    assert w.answer(follower) is None  # waits
    assert w.heartbeat(b) is E.none
    leader = w.sync(a, assignments={a: b"1", b: b"2"})
    assert w.stores[-1].awaited and w.stores[-1].record.state == GROUP_STABLE
    assert isinstance(w.stores[-1].failure, AssignmentNotStored)
    assert (w.synced(leader).assignment, w.synced(follower).assignment) == (b"1", b"2")
    assert w.g.state == GROUP_STABLE and w.g.deadline_ms is None
    # a SyncGroup of a Stable group gets the assignment again
    assert w.synced(w.sync(b)).assignment == b"2"


def test_error_codes_in_kafkas_order() -> None:
    w = World()
    (a,) = stable(w, 1)
    gen = w.g.generation
    # validateHeartbeat: member first, then generation
    assert w.heartbeat("nobody", gen + 5) is E.unknown_member_id
    assert w.heartbeat(a, gen + 1) is E.illegal_generation
    # validateSyncGroup: member, generation, protocol
    assert w.synced(w.sync("nobody")).error is E.unknown_member_id
    assert w.synced(w.sync(a, gen - 1)).error is E.illegal_generation
    token = w.token()
    w.do(Sync(token, gen, a, None, "consumer", "roundrobin"))
    assert w.synced(token).error is E.inconsistent_group_protocol
    # supportsProtocols
    assert w.joined(w.join(protocols=[("roundrobin", b"")])).error is \
        E.inconsistent_group_protocol
    assert w.joined(w.join("nobody")).error is E.unknown_member_id
    # doCommitOffsets
    assert w.commit("nobody", gen) is E.unknown_member_id
    assert w.commit(a, gen + 1) is E.illegal_generation
    assert w.commit(a, gen) is E.none
    assert w.g.state == GROUP_STABLE


def test_session_expiry_removes_the_silent_member_and_rebalances() -> None:
    w = World()
    live, silent = stable(w, 2)
    gen = w.g.generation
    for _ in range(3):  # `live` heartbeats, `silent` does not
        w.advance(SESSION_MS // 2)
        assert w.heartbeat(live) in (E.none, E.rebalance_in_progress)
    assert silent not in w.g.members
    assert w.g.state == GROUP_PREPARING_REBALANCE
    assert w.heartbeat(live) is E.rebalance_in_progress
    got = w.joined(w.join(live))
    assert (got.error, got.generation) == (E.none, gen + 1)
    assert [m[0] for m in got.members] == [live]
    assert w.heartbeat(silent) is E.unknown_member_id


def test_members_waiting_in_join_or_sync_do_not_expire() -> None:
    """MemberMetadata.hasSatisfiedHeartbeat: a member waiting for a JoinGroup or SyncGroup
    answer satisfies its heartbeats; the rebalance and sync deadlines bound the wait."""
    w = World()
    waiting, slow = stable(w, 2)
    t = w.join(waiting)  # the leader rejoins: waiting for `slow`
    for _ in range(4):  # past `waiting`'s session, within the rebalance timeout
        w.advance(SESSION_MS // 2)
        assert w.heartbeat(slow) is E.rebalance_in_progress
    assert waiting in w.g.members and w.answer(t) is None
    t_slow = w.join(slow)
    assert (w.joined(t).generation, w.joined(t_slow).generation) == (3, 3)
    # a follower waiting in SyncGroup outlives its session too
    follower = w.sync(slow)
    for _ in range(4):  # the leader takes longer than the follower's session
        w.advance(SESSION_MS // 2)
        assert w.heartbeat(waiting) is E.none
    assert slow in w.g.members and w.answer(follower) is None
    w.sync(waiting, assignments={waiting: b"w", slow: b"s"})
    assert w.synced(follower).assignment == b"s"


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    w = World()
    a, b = stable(w, 2)
    t = w.join(a)
    assert w.g.state == GROUP_PREPARING_REBALANCE
    assert w.g.deadline_ms == w.clock.now_ms() + REBALANCE_MS
    for _ in range(REBALANCE_MS // (SESSION_MS // 2) - 1):  # b heartbeats, never rejoins
        w.advance(SESSION_MS // 2)
        assert w.heartbeat(b) is E.rebalance_in_progress
    assert w.answer(t) is None
    w.advance(SESSION_MS // 2)
    got = w.joined(t)
    assert (got.error, got.generation, [m[0] for m in got.members]) == (E.none, 3, [a])
    assert w.heartbeat(b) is E.unknown_member_id


def test_sync_timeout_removes_members_that_did_not_sync() -> None:
    w = World()
    a, b = stable(w, 2)
    w.join(a)
    w.join(b)
    assert w.g.state == GROUP_COMPLETING_REBALANCE
    follower = w.sync(b)
    for _ in range(REBALANCE_MS // (SESSION_MS // 2)):  # the leader heartbeats, never syncs
        assert w.heartbeat(a) is E.none
        w.advance(SESSION_MS // 2)
    assert a not in w.g.members and b in w.g.members
    assert w.synced(follower).error is E.rebalance_in_progress
    assert w.g.state == GROUP_PREPARING_REBALANCE


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    w = World(delay_ms=3_000)
    t1 = w.join()
    assert w.g.state == GROUP_PREPARING_REBALANCE and w.g.initial_join
    w.advance(2_000)
    t2 = w.join()  # a new member: the delay starts again when it runs out
    w.advance(1_000)
    assert w.answer(t1) is None and w.g.initial_join
    w.advance(3_000)
    assert w.joined(t1).generation == w.joined(t2).generation == 1
    assert len(w.g.members) == 2


def test_leave_pending_static_and_unknown() -> None:
    w = World()
    s = w.joined(w.join(instance="s1")).member_id
    w.sync(s, assignments={s: b"x"})
    t = w.join()
    w.join(s)
    d = w.joined(t).member_id
    w.sync(s, assignments={s: b"x", d: b"y"})
    w.sync(d)
    assert w.g.state == GROUP_STABLE
    assert w.leave((d, None), ("nobody", None), ("", "s1"), ("", "ghost")) == (
        E.none, [E.none, E.unknown_member_id, E.none, E.unknown_member_id])
    assert w.g.state == GROUP_EMPTY and not w.g.members
    assert w.stores[-1].record.state == GROUP_EMPTY and not w.stores[-1].awaited


def test_static_member_rejoining_replaces_the_old_id_without_rebalance() -> None:
    w = World()
    s = w.joined(w.join(instance="s1")).member_id
    w.sync(s, assignments={s: b"mine"})
    gen = w.g.generation
    t = w.join(instance="s1", skip=True)
    got = w.joined(t)
    assert got.error is E.none and got.member_id not in ("", s)
    assert (got.generation, got.leader, got.skip_assignment) == (gen, got.member_id, True)
    assert w.stores[-1].awaited and w.stores[-1].record.state == GROUP_STABLE
    assert w.g.state == GROUP_STABLE
    assert w.synced(w.sync(got.member_id)).assignment == b"mine"
    # the old id with the instance id is fenced; without it, unknown
    assert w.heartbeat(s, instance="s1") is E.fenced_instance_id
    assert w.commit(s, gen, "s1") is E.fenced_instance_id
    assert w.heartbeat(s) is E.unknown_member_id
    # before v9 (no skip): the old leader id and no members
    old = w.joined(w.join(instance="s1")).leader
    assert old == got.member_id


def test_a_failed_store_is_stepped_as_its_failure() -> None:
    w = World()
    t = w.join()
    (a,) = w.g.members
    failure = w.stores[-1].failure
    assert isinstance(failure, JoinNotStored)
    # the runner keeps the group it had (Empty) and steps the failure
    w.g = Group("g", GroupLease("g", "a", 1))
    w.answers.pop(t)
    w.do(JoinNotStored(failure.token, failure.member_id, E.coordinator_not_available))
    assert w.joined(t).error is E.coordinator_not_available and not w.g.members
    # the leader's assignment not stored: every waiting SyncGroup fails, the group rebalances
    w = World()
    a, b = stable(w, 2)
    w.join(a)
    w.join(b)
    follower = w.sync(b)
    before = w.g
    leader = w.sync(a, assignments={a: b"1", b: b"2"})
    w.g = before
    w.answers.pop(leader)
    w.answers.pop(follower)
    w.do(AssignmentNotStored(leader, E.coordinator_not_available))
    assert w.synced(leader).error is w.synced(follower).error is E.coordinator_not_available
    assert w.g.state == GROUP_PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in w.g.members.values())


def test_drop_answers_every_waiting_request_not_coordinator() -> None:
    w = World()
    a, b = stable(w, 2)
    t = w.join(a)
    w.do(Drop("lease lost"))
    assert w.joined(t).error is E.not_coordinator
    assert w.g.state == GROUP_DEAD and w.g.next_deadline() is None
    assert w.heartbeat(b) is E.coordinator_not_available
    assert w.joined(w.join()).error is E.coordinator_not_available
