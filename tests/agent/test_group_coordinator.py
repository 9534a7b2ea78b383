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
        a = Coordinator(md, CONFIG, _run, lambda: "a")
        b = Coordinator(md, CONFIG, _run, lambda: "b")

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
        a = Coordinator(md, CONFIG, _run, lambda: "a")

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
        b = Coordinator(md, CONFIG, _run, lambda: "b")
        old = Coordinator(md, CONFIG, _run, lambda: "a")

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

            new = Coordinator(md, CONFIG, _run, lambda: "a")
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
