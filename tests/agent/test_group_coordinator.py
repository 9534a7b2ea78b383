"""The group coordinator's lease and fencing, two coordinators (two agents' worth) on one
metadata store in one process, on both backends: a coordinator whose lease was taken over
writes nothing and drops the group; the new one loads the stored group, members included."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from agent.config import AgentConfig
from agent.groups.coordinator import Coordinator, JoinRequest
from clock import ManualClock
from metadata import GroupMember, MetadataStore, OffsetCommit
from metadata.models import GROUP_STABLE

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
