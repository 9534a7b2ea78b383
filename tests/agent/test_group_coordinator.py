"""The group coordinator's lease and fencing, two coordinators (two agents' worth) on one
metadata store in one process, on both backends: a coordinator whose lease was taken over
writes nothing and drops the group; the new one loads the stored group, members included."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from agent.config import AgentConfig
from agent.groups import coordinator as coordinator_module
from agent.groups.coordinator import Coordinator, JoinRequest
from agent.protocol.errors import error_code
from clock import ManualClock
from metadata import GroupMember, GroupRecord, MetadataStore, OffsetCommit
from metadata.models import GROUP_EMPTY, GROUP_PREPARING_REBALANCE, GROUP_STABLE

T = TypeVar("T")
CONFIG = AgentConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=100)


async def _run(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


def _join(member_id: str = "", instance: str | None = None) -> JoinRequest:
    who = GroupMember(member_id, instance, "c", "/127.0.0.1", rebalance_timeout_ms=10_000,
                      session_timeout_ms=10_000)
    return JoinRequest(group_id="g", who=who, protocol_type="consumer",
                       protocols=[("range", b"meta")], require_known_member_id=False)


def test_a_taken_over_coordinator_is_fenced_and_the_new_one_loads_the_group(
        metadata_url: str) -> None:
    clock = ManualClock()
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    try:
        md.create_topic("t", 2)
        md.register_agent("a", "127.0.0.1", 1)
        md.register_agent("b", "127.0.0.1", 2)
        a = Coordinator(md, CONFIG, _run, lambda: "a", codes=error_code)
        b = Coordinator(md, CONFIG, _run, lambda: "b", codes=error_code)

        async def scenario() -> None:
            joined = await a.join(_join())
            assert joined.error is ErrorCode.none and joined.generation == 1
            member = joined.member_id
            synced = await a.sync("g", 1, member, None, None, None, [(member, b"assigned")])
            assert synced.error is ErrorCode.none and synced.assignment == b"assigned"
            ok = await a.commit("g", 1, member, None, [OffsetCommit("t", 0, 5)])
            assert ok == {("t", 0): ErrorCode.none}
            # While a is live, b may not take the group.
            assert (await b.heartbeat("g", 1, member, None)) is ErrorCode.not_coordinator
            # a's session lapses (a paused process); b heartbeats on and takes the group.
            clock.advance(md.config.broker_session_timeout_ms + 1)
            md.heartbeat_agent("b")
            assert (await b.heartbeat("g", 1, member, None)) is ErrorCode.none
            loaded = b.loaded("g")
            assert loaded is not None and loaded.state == GROUP_STABLE
            assert loaded.members[member].assignment == b"assigned"
            # a's commit is refused by the fence, and a drops the group.
            fenced = await a.commit("g", 1, member, None, [OffsetCommit("t", 0, 9)])
            assert fenced == {("t", 0): ErrorCode.not_coordinator}
            assert a.loaded("g") is None
            assert [o.offset for o in md.fetch_offsets("g")] == [5]
            ok = await b.commit("g", 1, member, None, [OffsetCommit("t", 0, 7)])
            assert ok == {("t", 0): ErrorCode.none}
            assert [o.offset for o in md.fetch_offsets("g")] == [7]
            a.close()
            b.close()

        asyncio.run(scenario())
    finally:
        md.close()


def test_check_leases_drops_a_group_whose_lease_moved(metadata_url: str) -> None:
    clock = ManualClock()
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    try:
        md.register_agent("a", "127.0.0.1", 1)
        a = Coordinator(md, CONFIG, _run, lambda: "a", codes=error_code)

        async def scenario() -> None:
            joined = await a.join(_join())
            assert joined.error is ErrorCode.none
            await a.check_leases()
            assert a.loaded("g") is not None  # still its own
            clock.advance(md.config.broker_session_timeout_ms + 1)
            md.register_agent("b", "127.0.0.1", 2)
            md.acquire_group("g", "b")
            await a.check_leases()
            assert a.loaded("g") is None
            a.close()

        asyncio.run(scenario())
    finally:
        md.close()


def test_a_restarted_agent_loads_the_groups_its_id_held(
        metadata_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new process with the same agent id (its address): ListGroups lists the groups the
    old one held at once, DescribeGroups and requests load them, and the start-up load takes
    the rest in pages (a Stable group keeps its members, a mid-rebalance one is Empty); a
    group a live other agent holds is neither listed nor taken."""
    monkeypatch.setattr(coordinator_module, "ADOPT_PAGE", 2)
    clock = ManualClock()
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    try:
        md.create_topic("t", 2)
        md.register_agent("a", "127.0.0.1", 1)
        md.register_agent("b", "127.0.0.1", 2)
        b = Coordinator(md, CONFIG, _run, lambda: "b", codes=error_code)
        old = Coordinator(md, CONFIG, _run, lambda: "a", codes=error_code)

        async def scenario() -> None:
            joined = await old.join(_join())
            member = joined.member_id
            await old.sync("g", 1, member, None, None, None, [(member, b"assigned")])
            assert await old.commit("simple", -1, "", None, [OffsetCommit("t", 1, 3)]) == {
                ("t", 1): ErrorCode.none}
            lease = md.acquire_group("mid", "a")
            md.store_group(lease, GroupRecord("mid", "consumer", "range", 4, "x",
                                              GROUP_PREPARING_REBALANCE, (), 0))
            for i in range(3):
                md.store_group(md.acquire_group(f"e{i}", "a"), GroupRecord(
                    f"e{i}", "consumer", None, 2, None, GROUP_EMPTY, (), 0))
            md.store_group((await b.group("bg")).lease, GroupRecord(
                "bg", "consumer", None, 1, None, GROUP_EMPTY, (), 0))
            old.close()  # the process dies; its leases stay (its id is live again below)

            new = Coordinator(md, CONFIG, _run, lambda: "a", codes=error_code)
            live = md.live_brokers()
            listed = {r.group_id: r.state for r in await new.listed(live)}
            assert listed == {"g": GROUP_STABLE, "simple": GROUP_EMPTY, "mid": GROUP_EMPTY,
                              "e0": GROUP_EMPTY, "e1": GROUP_EMPTY, "e2": GROUP_EMPTY}
            assert (await new.describe("bg"))[0] is ErrorCode.not_coordinator
            error, described = await new.describe("g")
            assert error is ErrorCode.none and described is not None
            assert [m.member_id for m in described.members] == [member]
            assert new.loaded("g") is not None
            if new._adopting is not None:
                await new._adopting
            assert sorted(new.groups) == ["e0", "e1", "e2", "g", "mid", "simple"]
            assert md.held_groups("b") == {"bg": 1}
            mid = md.load_group("mid")
            assert mid is not None and mid.state == GROUP_EMPTY and mid.generation == 4
            # the restored member goes on at its generation; the old process is fenced
            assert await new.heartbeat("g", 1, member, None) is ErrorCode.none
            assert await new.commit("g", 1, member, None, [OffsetCommit("t", 0, 2)]) == {
                ("t", 0): ErrorCode.none}
            assert {r.group_id for r in await b.listed(live)} == {"bg"}
            new.close()
            b.close()

        asyncio.run(scenario())
    finally:
        md.close()


# ------------------------------------------------------------------ deadlines on a ManualClock
# The coordinator's timing, moved here from tests/protocol/test_groups_raw.py (where they
# slept for real): the effect runner reads every deadline from the injected clock, so the
# test moves a ManualClock and calls `tick()` (what the runner's alarm does).

SHORT_MS, LONG_MS = 1_000, 30_000
E = ErrorCode


class _Member:
    """A member of group `group` on coordinator `c` (its last JoinGroup's id and
    generation), as tests/protocol/test_groups_raw.py's Member without the wire."""

    def __init__(self, c: Coordinator, group: str, session_ms: int = LONG_MS) -> None:
        self.c, self.group, self.session_ms = c, group, session_ms
        self.member_id, self.generation = "", -1
        self.join_task: asyncio.Task[Any] | None = None
        self.sync_task: asyncio.Task[Any] | None = None

    def start_join(self) -> None:
        who = GroupMember(self.member_id, None, "c", "/127.0.0.1", rebalance_timeout_ms=LONG_MS,
                          session_timeout_ms=self.session_ms)
        self.join_task = asyncio.ensure_future(self.c.join(JoinRequest(
            group_id=self.group, who=who, protocol_type="consumer",
            protocols=[("range", b"meta")], require_known_member_id=False)))

    async def joined(self) -> Any:
        assert self.join_task is not None
        resp = await asyncio.wait_for(self.join_task, 10)
        if resp.error is E.none:
            self.member_id, self.generation = resp.member_id, resp.generation
        return resp

    def start_sync(self, assignments: dict[str, bytes] | None = None) -> None:
        self.sync_task = asyncio.ensure_future(self.c.sync(
            self.group, self.generation, self.member_id, None, None, None,
            list((assignments or {}).items())))

    async def synced(self) -> Any:
        assert self.sync_task is not None
        return await asyncio.wait_for(self.sync_task, 10)

    async def sync(self, assignments: dict[str, bytes] | None = None) -> Any:
        self.start_sync(assignments)
        return await self.synced()

    async def heartbeat(self) -> ErrorCode:
        return await self.c.heartbeat(self.group, self.generation, self.member_id, None)


def _assignment(m: _Member) -> bytes:
    return f"assigned to {m.member_id}".encode()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _form_group(*members: _Member) -> None:
    """`members` in one Stable group, one newcomer at a time (each makes the others
    rejoin); the leader assigns `_assignment(m)`."""
    for n, newcomer in enumerate(members, start=1):
        inside = members[:n]
        newcomer.start_join()
        await _settle()
        for m in inside[:-1]:
            assert await m.heartbeat() is E.rebalance_in_progress
            m.start_join()
        answers = [await m.joined() for m in inside]
        assert [a.error for a in answers] == [E.none] * n, answers
        leader = next(m for m in inside if m.member_id == answers[0].leader)
        assert (await leader.sync({m.member_id: _assignment(m) for m in inside})).error \
            is E.none
        for m in inside:
            if m is not leader:
                assert (await m.sync()).error is E.none


def _scenario(metadata_url: str, body: Callable[[Coordinator, ManualClock], Any]) -> None:
    clock = ManualClock()
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    try:
        md.register_agent("a", "127.0.0.1", 1)
        c = Coordinator(md, CONFIG, _run, lambda: "a", codes=error_code)
        assert c.clock is clock

        async def run() -> None:
            try:
                await body(c, clock)
            finally:
                c.close()

        asyncio.run(run())
    finally:
        md.close()


async def _pass(c: Coordinator, clock: ManualClock, ms: int, *alive: _Member) -> None:
    """Let `ms` pass in steps of a quarter session, `alive` heartbeating at each."""
    step = SHORT_MS // 4
    for _ in range(ms // step):
        clock.advance(step)
        await c.tick()
        for m in alive:
            assert await m.heartbeat() in (E.none, E.rebalance_in_progress)
        await _settle()


def test_session_expiry_removes_the_silent_member(metadata_url: str) -> None:
    async def body(c: Coordinator, clock: ManualClock) -> None:
        live = _Member(c, "g-expiry")
        silent = _Member(c, "g-expiry", session_ms=SHORT_MS)
        await _form_group(live, silent)
        generation = live.generation
        # `silent` sends nothing: after its session it is removed (onExpireHeartbeat) and
        # the group rebalances; the live member is asked to rejoin
        await _pass(c, clock, SHORT_MS - SHORT_MS // 4, live)
        assert await live.heartbeat() is E.none
        await _pass(c, clock, SHORT_MS // 4)
        assert await live.heartbeat() is E.rebalance_in_progress
        live.start_join()
        resp = await live.joined()
        assert (resp.error, resp.generation) == (E.none, generation + 1)
        assert [m[0] for m in resp.members] == [live.member_id]
        assert await silent.heartbeat() is E.unknown_member_id
        assert (await live.sync({live.member_id: b"all"})).assignment == b"all"
        error, record = await c.describe("g-expiry")
        assert error is E.none
        assert record is not None and [m.member_id for m in record.members] == \
            [live.member_id]

    _scenario(metadata_url, body)


def test_members_waiting_in_join_do_not_expire_as_kafka(metadata_url: str) -> None:
    """MemberMetadata.hasSatisfiedHeartbeat: a member awaiting its JoinGroup answer
    satisfies its heartbeats (it cannot send any); only the rebalance timeout bounds the
    wait for the others."""
    async def body(c: Coordinator, clock: ManualClock) -> None:
        waiting = _Member(c, "g-await-join", session_ms=SHORT_MS)
        slow = _Member(c, "g-await-join")
        await _form_group(waiting, slow)  # `waiting` leads
        waiting.start_join()  # the leader rejoins: a rebalance, waiting for `slow`
        await _pass(c, clock, 5 * SHORT_MS // 2, slow)  # longer than `waiting`'s session
        assert await slow.heartbeat() is E.rebalance_in_progress
        slow.start_join()
        answers = await waiting.joined(), await slow.joined()
        assert [(a.error, a.generation) for a in answers] == [(E.none, 3), (E.none, 3)]

    _scenario(metadata_url, body)


def test_members_waiting_in_sync_do_not_expire_as_kafka(metadata_url: str) -> None:
    """As above for a follower awaiting the leader's assignment in SyncGroup."""
    async def body(c: Coordinator, clock: ManualClock) -> None:
        leader = _Member(c, "g-await-sync")
        waiting = _Member(c, "g-await-sync", session_ms=SHORT_MS)
        await _form_group(leader, waiting)
        leader.start_join()
        await _settle()
        assert await waiting.heartbeat() is E.rebalance_in_progress
        waiting.start_join()
        assert ((await leader.joined()).error, (await waiting.joined()).error) == \
            (E.none, E.none)
        waiting.start_sync()
        # the leader takes longer than the follower's session
        await _pass(c, clock, 5 * SHORT_MS // 2, leader)
        assert not waiting.sync_task or not waiting.sync_task.done()
        assert (await leader.sync({m.member_id: _assignment(m) for m in (leader, waiting)})
                ).error is E.none
        got = await waiting.synced()
        assert (got.error, got.assignment) == (E.none, _assignment(waiting))

    _scenario(metadata_url, body)


def test_rebalance_timeout_answers_the_members_that_rejoined(metadata_url: str) -> None:
    """The join phase ends at the longest rebalance timeout: members that did not rejoin
    are removed (Kafka's onCompleteJoin)."""
    async def body(c: Coordinator, clock: ManualClock) -> None:
        a = _Member(c, "g-rebalance-timeout")
        b = _Member(c, "g-rebalance-timeout")
        await _form_group(a, b)
        a.start_join()
        await _settle()
        clock.advance(LONG_MS // 2)
        await c.tick()
        assert await b.heartbeat() is E.rebalance_in_progress  # its session goes on
        clock.advance(LONG_MS // 2 - 1)
        await c.tick()
        assert a.join_task is not None and not a.join_task.done()
        clock.advance(1)
        await c.tick()
        got = await a.joined()
        assert (got.error, got.generation, [m[0] for m in got.members]) == \
            (E.none, 3, [a.member_id])
        assert await b.heartbeat() is E.unknown_member_id

    _scenario(metadata_url, body)
