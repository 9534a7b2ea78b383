"""The group coordinator of one `silt agent`: Kafka's classic GroupCoordinator on the event
loop, for the groups whose lease (metadata/groups.py) this agent holds.

A group is loaded at its first request here: the lease is taken (refused while another live
agent holds it: NOT_COORDINATOR) and the group read from the store, its members keeping
their ids and assignment, so after a coordinator moves they go on heartbeating at their
generation without a rebalance (or their sessions expire), as Kafka's onGroupLoaded. An
agent restarted on its address has its previous process's agent id, and so its leases: it
loads those groups at start, in pages in the background (`adopt_soon`, as Kafka's
coordinator loads the groups of the offsets partitions it is elected for); meanwhile
ListGroups lists them as they will load and any request for one loads it at once. What
is stored, and when (each write fenced by the lease):

- the group leaving Empty, before its first rebalance proceeds (so `silt groups
  reset-offsets`, which holds the group's row, never races a member's first offset read);
- the leader's assignment, before any member gets it (SyncGroup), as Stable;
- the group becoming Empty (last member gone).

A write refused because the lease moved drops the group here (its waiting members are
answered NOT_COORDINATOR and look the coordinator up again). Any other store failure
answers COORDINATOR_NOT_AVAILABLE (retriable) and leaves the group as it was, or — for the
assignment — rebalances it. A crash of the agent loses only in-memory progress of a
rebalance: the next coordinator loads the last stored generation and members rejoin.

Timers (session expiry, rebalance and sync deadlines, the initial rebalance delay) are loop
callbacks that take the group's lock and re-check what they were set for.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from agent.config import AgentConfig
from agent.placement import coordinator
from metadata import (
    AgentInfo,
    GroupLease,
    GroupMember,
    GroupRecord,
    MetadataStore,
    OffsetCommit,
)
from metadata.errors import (
    GroupCoordinatedElsewhereError,
    GroupLeaseLostError,
    GroupNotEmptyError,
    UnknownGroupError,
)

from .group import (
    GROUP_COMPLETING_REBALANCE,
    GROUP_DEAD,
    GROUP_EMPTY,
    GROUP_PREPARING_REBALANCE,
    GROUP_STABLE,
    Group,
    JoinResult,
    Member,
    SyncResult,
    as_loaded,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
ADOPT_PAGE = 100  # groups loaded per transaction at start
Run = Callable[..., Awaitable[Any]]

E = ErrorCode


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """What a JoinGroup asks, whatever its version: the joining member as it says it is
    (`who`; member id "" if new, no metadata or assignment) and its protocols."""

    group_id: str
    who: GroupMember
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # v4+: a new member first gets MEMBER_ID_REQUIRED
    supports_skip_assignment: bool = False  # v9+ (KIP-814)

    @property
    def member_id(self) -> str:
        return self.who.member_id

    @property
    def group_instance_id(self) -> str | None:
        return self.who.group_instance_id

    def member(self, member_id: str, assignment: bytes = b"") -> GroupMember:
        """The joining member as `member_id`, with `assignment` (kept across a rejoin)."""
        return dataclasses.replace(self.who, member_id=member_id, assignment=assignment)


class Unavailable(Exception):
    """The request cannot be served here now: answered with `code`."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class Coordinator:
    """The groups this agent coordinates. `me()` is this agent's registry id (None before
    it registered); `run` runs blocking calls off the loop."""

    def __init__(self, metadata: MetadataStore, config: AgentConfig, run: Run,
                 me: Callable[[], str | None]) -> None:
        self.metadata = metadata
        self.config = config
        self.run = run
        self.me = me
        self.groups: dict[str, Group] = {}
        # Groups being loaded; None from a start-up load that did not load it (the waiter
        # loads it itself).
        self._loading: dict[str, asyncio.Future[Group | None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._adopting: asyncio.Task[None] | None = None
        self._adopted = False
        self._closed = False

    # ------------------------------------------------------------------ loading

    def loaded(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    async def group(self, group_id: str) -> Group:
        """The group, loaded here (taking its lease) if it is not yet; Unavailable(
        NOT_COORDINATOR) if another live agent coordinates it."""
        if (g := self.groups.get(group_id)) is not None:
            return g
        while (loading := self._loading.get(group_id)) is not None:
            if (g := await asyncio.shield(loading)) is not None:
                return g
        if (g := self.groups.get(group_id)) is not None:
            return g
        fut: asyncio.Future[Group | None] = asyncio.get_running_loop().create_future()
        self._loading[group_id] = fut
        try:
            g = await self._load(group_id)
            fut.set_result(g)
            return g
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters re-raise it
            raise
        finally:
            del self._loading[group_id]

    async def existing(self, group_id: str) -> Group | None:
        """The group if it exists (coordinated here, stored, or with committed offsets),
        loaded here; None for a group nobody ever used — answered as Kafka answers an
        unknown group, without taking its lease. Unavailable(NOT_COORDINATOR) if another
        live agent coordinates it."""
        if (g := self.groups.get(group_id)) is not None:
            return g
        holder = await self.run(self.metadata.group_coordinator, group_id)
        if holder is not None and holder.agent_id != self.me():
            raise Unavailable(E.not_coordinator)
        return await self._load_existing(group_id)

    async def _load_existing(self, group_id: str) -> Group | None:
        """`existing` once the holder is known to be this agent or nobody."""
        if (g := self.groups.get(group_id)) is not None:
            return g
        if await self.run(self.metadata.load_group, group_id) is None and \
                not await self.run(self.metadata.fetch_offsets, group_id):
            return None
        return await self.group(group_id)

    async def _load(self, group_id: str) -> Group:
        me = self.me()
        if self._closed:  # shutting down: clients go to another agent
            raise Unavailable(E.not_coordinator)
        if me is None:
            raise Unavailable(E.coordinator_not_available)
        try:
            lease = await self.run(self.metadata.acquire_group, group_id, me)
        except GroupCoordinatedElsewhereError:
            raise Unavailable(E.not_coordinator) from None
        record: GroupRecord | None = await self.run(self.metadata.load_group, group_id)
        return await self._install(lease, record)

    async def _install(self, lease: GroupLease, stored: GroupRecord | None) -> Group:
        """Coordinate the group from its stored record (Kafka's onGroupLoaded): restored
        members' sessions start now; a group stored mid-rebalance is stored again as
        Empty."""
        now = self._now_ms()
        record = None if stored is None else as_loaded(stored, now)
        g = Group.loaded(lease, record)
        if record is not stored:
            await self._store(g, g.record(now))
        for member in g.members.values():
            self._heard_from(g, member)
        self.groups[g.group_id] = g
        log.info("coordinating group %r (lease epoch %d, generation %d, %s)", g.group_id,
                 lease.epoch, g.generation, g.state)
        return g

    def drop(self, g: Group, why: str) -> None:
        """Stop coordinating `g` here (lease lost, deleted, shutdown): every waiting member
        is answered NOT_COORDINATOR and looks the coordinator up again."""
        if self.groups.get(g.group_id) is g:
            del self.groups[g.group_id]
        log.info("group %r: no longer coordinated here (%s)", g.group_id, why)
        g.state = GROUP_DEAD
        for m in g.members.values():
            self._cancel(m)
            m.answer_join(JoinResult(E.not_coordinator, m.member_id))
            m.answer_sync(SyncResult(E.not_coordinator))
        for handle in g.pending.values():
            handle.cancel()
        g.pending.clear()
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()

    def adopt_soon(self) -> None:
        """Start loading, once and in the background, the groups whose lease this agent's
        id already holds: its previous process's (the id is the advertised address), as
        Kafka's coordinator loads the groups of the offsets partitions it is elected for
        (onElection, loadGroupsForPartition). Until then ListGroups lists them as they will load
        and a request for one loads it at once."""
        if self._adopted or self._closed or self.me() is None or \
                (self._adopting is not None and not self._adopting.done()):
            return
        self._adopting = asyncio.ensure_future(self._adopt())
        self._tasks.add(self._adopting)
        self._adopting.add_done_callback(self._tasks.discard)

    async def _adopt(self) -> None:
        me = self.me()
        assert me is not None
        after: str | None = None
        adopted = 0
        try:
            while not self._closed:
                page: list[str] = await self.run(self.metadata.held_existing_groups, me,
                                                 after, ADOPT_PAGE)
                if not page:
                    break
                after = page[-1]
                adopted += await self._adopt_page(
                    me, [gid for gid in page if gid not in self.groups
                         and gid not in self._loading])
        except Exception:
            log.exception("loading the groups held at start failed (retrying)")
            return
        self._adopted = True
        if adopted:
            log.info("loaded %d group(s) whose lease this agent's id held at start", adopted)

    async def _adopt_page(self, me: str, group_ids: list[str]) -> int:
        """Load these groups (one transaction takes their leases): those still held by
        this agent's id and existing; the others are left to their first request."""
        if not group_ids:
            return 0
        loop = asyncio.get_running_loop()
        futs: dict[str, asyncio.Future[Group | None]] = {
            gid: loop.create_future() for gid in group_ids}
        self._loading.update(futs)
        n = 0
        try:
            taken: list[tuple[GroupLease, GroupRecord | None]] = await self.run(
                self.metadata.adopt_groups, me, group_ids)
            for lease, record in taken:
                if self._closed:
                    break
                try:
                    futs[lease.group_id].set_result(await self._install(lease, record))
                    n += 1
                except Exception as exc:  # its first request loads it again
                    log.warning("group %r: loading it failed: %s", lease.group_id, exc)
        finally:
            for gid, fut in futs.items():
                if self._loading.get(gid) is fut:
                    del self._loading[gid]
                if not fut.done():
                    fut.set_result(None)
        return n

    async def check_leases(self) -> None:
        """Drop the loaded groups whose lease this agent no longer holds (taken over while
        this agent was paused past its session); start loading those it held at start."""
        me = self.me()
        if me is None:
            return
        self.adopt_soon()
        if not self.groups:
            return
        before = dict(self.groups)  # groups loaded later took their lease after the read
        held: dict[str, int] = await self.run(self.metadata.held_groups, me)
        for group_id, g in before.items():
            if self.groups.get(group_id) is g and held.get(group_id) != g.lease.epoch:
                self.drop(g, "lease taken over")

    def close(self) -> None:
        """Stop coordinating (shutdown): waiting members are answered NOT_COORDINATOR and
        no group is loaded from now on."""
        self._closed = True
        for g in list(self.groups.values()):
            self.drop(g, "shutting down")
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------------ helpers

    def _now_ms(self) -> int:
        return self.metadata.clock.now_ms()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _store(self, g: Group, record: GroupRecord) -> asyncio.Future[None]:
        """Store `record` after the group's earlier stores (in order); a lost lease drops
        the group. The caller may await the result (it raises what the store raised)."""
        prev = g.last_store

        async def write() -> None:
            if prev is not None:
                with contextlib.suppress(Exception):
                    await prev
            await self.run(self.metadata.store_group, g.lease, record)

        fut = asyncio.ensure_future(write())
        g.last_store = fut

        def done(f: asyncio.Future[None]) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if isinstance(exc, GroupLeaseLostError):
                self.drop(g, str(exc))
            elif exc is not None:
                log.warning("group %r: storing generation %d failed: %s", g.group_id,
                            record.generation, exc)

        fut.add_done_callback(done)
        return fut

    def _heard_from(self, g: Group, m: Member) -> None:
        """Push the member's session deadline out (a heartbeat, join, sync or commit)."""
        loop = asyncio.get_running_loop()
        m.deadline = loop.time() + m.session_timeout_ms / 1000
        if m.timer is None:
            m.timer = loop.call_at(m.deadline, self._session_check, g, m)

    def _session_check(self, g: Group, m: Member) -> None:
        m.timer = None
        if g.members.get(m.member_id) is not m or g.is_(GROUP_DEAD):
            return
        loop = asyncio.get_running_loop()
        if m.join is not None or m.sync is not None:
            # Waiting on a JoinGroup or SyncGroup answer counts as heartbeating (Kafka's
            # MemberMetadata.hasSatisfiedHeartbeat): the rebalance and sync deadlines bound it.
            m.deadline = loop.time() + m.session_timeout_ms / 1000
        if loop.time() < m.deadline:
            m.timer = loop.call_at(m.deadline, self._session_check, g, m)
            return
        self._spawn(self._expire(g, m))

    async def _expire(self, g: Group, m: Member) -> None:
        async with g.lock:
            if g.members.get(m.member_id) is m and m.join is None and m.sync is None and \
                    asyncio.get_running_loop().time() >= m.deadline:
                log.info("group %r: member %s session timed out", g.group_id, m.member_id)
                await self._remove_and_rebalance(g, m)

    @staticmethod
    def _cancel(m: Member) -> None:
        if m.timer is not None:
            m.timer.cancel()
            m.timer = None

    def _remove(self, g: Group, m: Member) -> None:
        """Take `m` out of the group (no rebalance decided here)."""
        g.members.pop(m.member_id, None)
        if m.group_instance_id and g.static.get(m.group_instance_id) == m.member_id:
            del g.static[m.group_instance_id]
        g.pending_sync.discard(m.member_id)
        self._cancel(m)
        m.answer_join(JoinResult(E.unknown_member_id, m.member_id))
        m.answer_sync(SyncResult(E.unknown_member_id))
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)

    async def _remove_and_rebalance(self, g: Group, m: Member) -> None:
        self._remove(g, m)
        if g.state in (GROUP_STABLE, GROUP_COMPLETING_REBALANCE):
            await self._prepare_rebalance(g)
        elif g.is_(GROUP_PREPARING_REBALANCE):
            self._maybe_complete_join(g)

    def _rebalance_timeout_s(self, g: Group) -> float:
        return max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000

    # ------------------------------------------------------------------ rebalances

    async def _prepare_rebalance(self, g: Group) -> None:
        """Start a rebalance (Kafka's prepareRebalance). From Empty, the group is stored
        first (raises if that fails, with nothing changed)."""
        if g.is_(GROUP_EMPTY):
            await self._store(g, g.record(self._now_ms(), GROUP_PREPARING_REBALANCE))
        if g.is_(GROUP_COMPLETING_REBALANCE):
            for m in g.members.values():
                m.answer_sync(SyncResult(E.rebalance_in_progress))
            g.pending_sync.clear()
        was_empty = g.is_(GROUP_EMPTY)
        g.state, g.state_at_ms = GROUP_PREPARING_REBALANCE, self._now_ms()
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
        loop = asyncio.get_running_loop()
        timeout_s = self._rebalance_timeout_s(g)
        delay_s = self.config.group_initial_rebalance_delay_ms / 1000
        if was_empty and delay_s > 0:
            g.initial_join, g.new_member_added = True, False
            first = min(delay_s, timeout_s)
            g.rebalance_timer = loop.call_later(first, self._initial_delay_over, g,
                                                timeout_s - first)
        else:
            g.initial_join = False
            g.rebalance_timer = loop.call_later(timeout_s, self._rebalance_over, g,
                                                g.generation)
            self._maybe_complete_join(g)  # e.g. the last member left: Empty at once

    def _initial_delay_over(self, g: Group, remaining_s: float) -> None:
        async def go() -> None:
            async with g.lock:
                if not (g.is_(GROUP_PREPARING_REBALANCE) and g.initial_join):
                    return
                if g.new_member_added and remaining_s > 0:  # more are coming: wait again
                    g.new_member_added = False
                    step = min(self.config.group_initial_rebalance_delay_ms / 1000,
                               remaining_s)
                    g.rebalance_timer = asyncio.get_running_loop().call_later(
                        step, self._initial_delay_over, g, remaining_s - step)
                    return
                g.initial_join = False
                self._complete_join(g)
        self._spawn(go())

    def _rebalance_over(self, g: Group, generation: int) -> None:
        async def go() -> None:
            async with g.lock:
                if g.is_(GROUP_PREPARING_REBALANCE) and g.generation == generation \
                        and not g.initial_join:
                    self._complete_join(g)
        self._spawn(go())

    def _maybe_complete_join(self, g: Group) -> None:
        if g.is_(GROUP_PREPARING_REBALANCE) and not g.initial_join and g.all_joined():
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        """End the join phase: members that did not rejoin are removed, the generation
        moves on, every waiting JoinGroup is answered (the leader with the members)."""
        if g.rebalance_timer is not None:
            g.rebalance_timer.cancel()
            g.rebalance_timer = None
        for m in [m for m in g.members.values() if m.join is None]:
            log.info("group %r: member %s did not rejoin in time", g.group_id, m.member_id)
            self._remove(g, m)
        g.generation += 1
        g.state_at_ms = self._now_ms()
        if not g.members:
            g.state, g.protocol_name, g.leader = GROUP_EMPTY, None, None
            self._store(g, g.record(g.state_at_ms))
            log.info("group %r: generation %d is empty", g.group_id, g.generation)
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.protocol_name = g.select_protocol()
        g.state = GROUP_COMPLETING_REBALANCE
        for m in g.members.values():
            m.answer_join(g.join_result(m))
            self._heard_from(g, m)
        g.pending_sync = set(g.members)
        g.rebalance_timer = asyncio.get_running_loop().call_later(
            self._rebalance_timeout_s(g), self._sync_over, g, g.generation)
        log.info("group %r: generation %d with %d member(s), protocol %s", g.group_id,
                 g.generation, len(g.members), g.protocol_name)

    def _sync_over(self, g: Group, generation: int) -> None:
        async def go() -> None:
            async with g.lock:
                if not (g.is_(GROUP_COMPLETING_REBALANCE) and g.generation == generation):
                    return
                for member_id in list(g.pending_sync):
                    if (m := g.members.get(member_id)) is not None:
                        log.info("group %r: member %s did not sync in time", g.group_id,
                                 member_id)
                        self._remove(g, m)
                await self._prepare_rebalance(g)
        self._spawn(go())

    # ------------------------------------------------------------------ JoinGroup

    def _check_member(self, g: Group, member_id: str,
                      instance_id: str | None) -> Member | ErrorCode:
        """Kafka's validateCurrentMember: the member, or UNKNOWN_MEMBER_ID /
        FENCED_INSTANCE_ID."""
        if instance_id:
            known = g.static.get(instance_id)
            if known is not None and known != member_id:
                return E.fenced_instance_id
        m = g.members.get(member_id)
        if m is None:
            return E.unknown_member_id
        if m.group_instance_id and instance_id is not None \
                and m.group_instance_id != instance_id:
            return E.fenced_instance_id
        return m

    async def join(self, req: JoinRequest) -> JoinResult:
        """Answer a JoinGroup (waits for the rebalance to complete)."""
        if not req.group_id:
            return JoinResult(E.invalid_group_id, req.member_id)
        if not self.config.group_min_session_timeout_ms <= req.who.session_timeout_ms \
                <= self.config.group_max_session_timeout_ms:
            return JoinResult(E.invalid_session_timeout, req.member_id)
        try:
            g = await self.group(req.group_id)
            async with g.lock:
                if g.is_(GROUP_DEAD):
                    return JoinResult(E.coordinator_not_available, req.member_id)
                if not g.supports(req.protocol_type, req.protocols):
                    return JoinResult(E.inconsistent_group_protocol, req.member_id)
                if not req.member_id:
                    waiter = await self._join_new(g, req)
                else:
                    waiter = await self._join_known(g, req)
        except Unavailable as exc:
            return JoinResult(exc.code, req.member_id)
        except GroupLeaseLostError:
            return JoinResult(E.not_coordinator, req.member_id)
        except Exception:
            log.exception("group %r: JoinGroup failed", req.group_id)
            return JoinResult(E.coordinator_not_available, req.member_id)
        if isinstance(waiter, JoinResult):
            return waiter
        return await waiter

    async def _join_new(self, g: Group, req: JoinRequest) -> JoinResult | \
            asyncio.Future[JoinResult]:
        new_id = f"{req.who.client_id}-{uuid.uuid4()}"
        if req.group_instance_id and req.group_instance_id in g.static:
            return await self._replace_static(g, req, new_id)
        if req.require_known_member_id and not req.group_instance_id:
            loop = asyncio.get_running_loop()
            g.pending[new_id] = loop.call_later(req.who.session_timeout_ms / 1000,
                                                self._pending_over, g, new_id)
            return JoinResult(E.member_id_required, new_id)
        return await self._add_member(g, req, new_id)

    def _pending_over(self, g: Group, member_id: str) -> None:
        async def go() -> None:
            async with g.lock:
                if g.pending.pop(member_id, None) is not None:
                    self._maybe_complete_join(g)
        self._spawn(go())

    async def _add_member(self, g: Group, req: JoinRequest,
                          member_id: str) -> asyncio.Future[JoinResult]:
        if (handle := g.pending.pop(member_id, None)) is not None:
            handle.cancel()
        m = Member(req.member(member_id), req.protocol_type, req.protocols)
        fut = m.join = asyncio.get_running_loop().create_future()
        first = not g.members
        g.members[member_id] = m
        if req.group_instance_id:
            g.static[req.group_instance_id] = member_id
        if first:
            g.protocol_type = req.protocol_type
            g.leader = member_id
        g.new_member_added = True
        self._heard_from(g, m)
        try:
            if g.state in (GROUP_EMPTY, GROUP_STABLE, GROUP_COMPLETING_REBALANCE):
                await self._prepare_rebalance(g)
        except BaseException:
            self._remove(g, m)  # nothing stored: as if it never joined
            raise
        self._maybe_complete_join(g)
        return fut

    async def _replace_static(self, g: Group, req: JoinRequest,
                              new_id: str) -> JoinResult | asyncio.Future[JoinResult]:
        """A static member rejoining under a new member id (Kafka's
        updateStaticMemberAndRebalance): the old id is fenced. In Stable, if the group's
        protocol would stay the same, the group is stored with the new id and the member
        gets its old assignment back without a rebalance; otherwise the group rebalances."""
        instance = req.group_instance_id or ""
        old_id = g.static[instance]
        old = g.members[old_id]
        old.answer_join(JoinResult(E.fenced_instance_id, old_id))
        old.answer_sync(SyncResult(E.fenced_instance_id))
        self._cancel(old)
        old_leader = g.leader
        m = Member(req.member(new_id, old.assignment), req.protocol_type, req.protocols)

        def swap(out: Member, into: Member) -> None:
            del g.members[out.member_id]
            g.members[into.member_id] = into
            g.static[instance] = into.member_id
            if g.leader == out.member_id:
                g.leader = into.member_id
            g.pending_sync.discard(out.member_id)

        swap(old, m)
        self._heard_from(g, m)
        if g.is_(GROUP_STABLE) and g.select_protocol() == g.protocol_name:
            try:
                await self._store(g, g.record(self._now_ms()))
            except BaseException:
                self._cancel(m)
                swap(m, old)
                self._heard_from(g, old)
                raise
            is_leader = g.leader == new_id
            skip = is_leader and req.supports_skip_assignment
            result = g.join_result(m)
            # An older leader is told the old leader id, so it does not assign (KIP-814
            # clients are told to skip assigning instead): the assignment stays as it is.
            return JoinResult(result.error, new_id, result.generation, result.protocol_type,
                              result.protocol_name,
                              result.leader if skip else (old_leader or ""),
                              result.members if skip else (), skip_assignment=skip)
        fut = m.join = asyncio.get_running_loop().create_future()
        if g.state in (GROUP_STABLE, GROUP_COMPLETING_REBALANCE):
            await self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return fut

    async def _join_known(self, g: Group, req: JoinRequest) -> JoinResult | \
            asyncio.Future[JoinResult]:
        if req.member_id in g.pending:
            return await self._add_member(g, req, req.member_id)
        checked = self._check_member(g, req.member_id, req.group_instance_id)
        if isinstance(checked, ErrorCode):
            return JoinResult(checked, req.member_id)
        m = checked
        if g.state in (GROUP_EMPTY, GROUP_DEAD):
            return JoinResult(E.unknown_member_id, req.member_id)
        self._heard_from(g, m)
        if g.is_(GROUP_COMPLETING_REBALANCE) and m.matches(req.protocols):
            return g.join_result(m)  # it missed the answer: send it again
        if g.is_(GROUP_STABLE) and m.member_id != g.leader and m.matches(req.protocols):
            return g.join_result(m)  # a follower with nothing new
        if m.join is not None:  # a JoinGroup of its was already waiting: this one replaces it
            m.answer_join(JoinResult(E.rebalance_in_progress, m.member_id))
        m.protocols = req.protocols
        m.info = req.member(m.member_id, m.assignment)
        fut = m.join = asyncio.get_running_loop().create_future()
        if g.state in (GROUP_STABLE, GROUP_COMPLETING_REBALANCE):
            await self._prepare_rebalance(g)
        self._maybe_complete_join(g)
        return fut

    # ------------------------------------------------------------------ SyncGroup

    async def sync(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None,
                   assignments: Sequence[tuple[str, bytes]]) -> SyncResult:
        """Answer a SyncGroup (a follower waits for the leader's assignment)."""
        try:
            g = await self.existing(group_id)
            if g is None:
                return SyncResult(E.unknown_member_id)
            async with g.lock:
                answer = await self._sync(g, generation, member_id, instance_id,
                                          protocol_type, protocol_name, assignments)
        except Unavailable as exc:
            return SyncResult(exc.code)
        except GroupLeaseLostError:
            return SyncResult(E.not_coordinator)
        if isinstance(answer, SyncResult):
            return answer
        return await answer

    async def _sync(self, g: Group, generation: int, member_id: str, instance_id: str | None,
                    protocol_type: str | None, protocol_name: str | None,
                    assignments: Sequence[tuple[str, bytes]]) -> SyncResult | \
            asyncio.Future[SyncResult]:
        if g.is_(GROUP_DEAD):
            return SyncResult(E.coordinator_not_available)
        checked = self._check_member(g, member_id, instance_id)
        if isinstance(checked, ErrorCode):
            return SyncResult(checked)
        m = checked
        if generation != g.generation:
            return SyncResult(E.illegal_generation)
        if (protocol_type is not None and protocol_type != g.protocol_type) or \
                (protocol_name is not None and protocol_name != g.protocol_name):
            return SyncResult(E.inconsistent_group_protocol)
        if g.is_(GROUP_EMPTY):
            return SyncResult(E.unknown_member_id)
        if g.is_(GROUP_PREPARING_REBALANCE):
            return SyncResult(E.rebalance_in_progress)
        self._heard_from(g, m)
        if g.is_(GROUP_STABLE):
            return SyncResult(E.none, g.protocol_type, g.protocol_name, m.assignment)
        # CompletingRebalance
        if m.sync is not None:
            m.answer_sync(SyncResult(E.rebalance_in_progress))
        fut = m.sync = asyncio.get_running_loop().create_future()
        g.pending_sync.discard(member_id)
        if member_id == g.leader:
            given = dict(assignments)
            for other in g.members.values():
                other.assignment = given.get(other.member_id, b"")
            try:
                await self._store(g, g.record(self._now_ms(), GROUP_STABLE))
            except GroupLeaseLostError:
                raise
            except Exception as exc:
                log.warning("group %r: the assignment could not be stored: %s", g.group_id,
                            exc)
                for other in g.members.values():
                    other.assignment = b""
                    other.answer_sync(SyncResult(E.coordinator_not_available))
                await self._prepare_rebalance(g)
                return fut
            g.state, g.state_at_ms = GROUP_STABLE, self._now_ms()
            if g.rebalance_timer is not None:
                g.rebalance_timer.cancel()
                g.rebalance_timer = None
            g.pending_sync.clear()
            for other in g.members.values():
                other.answer_sync(SyncResult(E.none, g.protocol_type, g.protocol_name,
                                             other.assignment))
        return fut

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    async def heartbeat(self, group_id: str, generation: int, member_id: str,
                        instance_id: str | None) -> ErrorCode:
        try:
            g = await self.existing(group_id)
        except Unavailable as exc:
            return exc.code
        if g is None:
            return E.unknown_member_id
        async with g.lock:
            if g.is_(GROUP_DEAD):
                return E.coordinator_not_available
            checked = self._check_member(g, member_id, instance_id)
            if isinstance(checked, ErrorCode):
                return checked
            if g.is_(GROUP_EMPTY):
                return E.unknown_member_id
            if generation != g.generation:
                return E.illegal_generation
            self._heard_from(g, checked)
            if g.is_(GROUP_PREPARING_REBALANCE):
                return E.rebalance_in_progress
            return E.none

    async def leave(self, group_id: str,
                    members: Sequence[tuple[str, str | None]]) -> tuple[ErrorCode,
                                                                        list[ErrorCode]]:
        """LeaveGroup: (top-level error, one error per (member id, instance id))."""
        try:
            g = await self.existing(group_id)
        except Unavailable as exc:
            return exc.code, []
        if g is None:
            return E.none, [E.unknown_member_id] * len(members)
        out: list[ErrorCode] = []
        try:
            async with g.lock:
                if g.is_(GROUP_DEAD):
                    return E.coordinator_not_available, []
                for member_id, instance_id in members:
                    if not member_id and instance_id:  # a static member leaving by instance
                        member_id = g.static.get(instance_id, "")
                    if member_id in g.pending:
                        g.pending.pop(member_id).cancel()
                        self._maybe_complete_join(g)
                        out.append(E.none)
                        continue
                    checked = self._check_member(g, member_id, instance_id)
                    if isinstance(checked, ErrorCode):
                        out.append(checked)
                        continue
                    log.info("group %r: member %s left", g.group_id, member_id)
                    await self._remove_and_rebalance(g, checked)
                    out.append(E.none)
        except GroupLeaseLostError:
            return E.not_coordinator, []
        return E.none, out

    # ------------------------------------------------------------------ offsets

    async def commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None,
                     offsets: Sequence[OffsetCommit]) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit: an error per (topic, partition); all stored in one transaction."""
        keys = [(o.topic, o.partition) for o in offsets]

        def every(code: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
            return dict.fromkeys(keys, code)

        try:  # an empty group id is valid here, as in Kafka (old clients commit under it)
            g = await self.existing(group_id)
            if g is None:
                if generation >= 0:  # no such group: a commit of an older generation
                    return every(E.illegal_generation)
                g = await self.group(group_id)  # a "simple" consumer's group is created
        except Unavailable as exc:
            return every(exc.code)
        async with g.lock:
            error = self._commit_allowed(g, generation, member_id, instance_id)
            if error is not E.none:
                return every(error)
            lease = g.lease
        limit = self.config.offset_metadata_max_bytes
        out = {(o.topic, o.partition): E.offset_metadata_too_large for o in offsets
               if o.metadata is not None and len(o.metadata.encode()) > limit}
        good = [o for o in offsets if (o.topic, o.partition) not in out]
        try:
            unknown: set[tuple[str, int]] = await self.run(
                self.metadata.commit_offsets, group_id, good, lease) if good else set()
        except GroupLeaseLostError as exc:
            self.drop(g, str(exc))
            return every(E.not_coordinator)
        except Exception:
            log.exception("group %r: OffsetCommit failed", group_id)
            return every(E.coordinator_not_available)
        for key in keys:
            out.setdefault(key, E.unknown_topic_or_partition if key in unknown else E.none)
        return out

    def _commit_allowed(self, g: Group, generation: int, member_id: str,
                        instance_id: str | None) -> ErrorCode:
        """Kafka's doCommitOffsets checks, in its order."""
        if g.is_(GROUP_DEAD):
            return E.coordinator_not_available
        if instance_id and g.static.get(instance_id, member_id) != member_id:
            return E.fenced_instance_id
        if generation < 0 and g.is_(GROUP_EMPTY):
            return E.none  # the group only stores offsets ("simple" consumers)
        m = g.members.get(member_id)
        if m is None:
            return E.unknown_member_id
        if generation != g.generation:
            return E.illegal_generation
        if g.is_(GROUP_COMPLETING_REBALANCE):
            return E.rebalance_in_progress
        self._heard_from(g, m)
        return E.none

    async def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (Kafka's handleDeleteOffsets): any partition of an empty group; of
        a consumer group with members, those of topics it does not subscribe to (a
        subscription that cannot be read counts as subscribed to everything); another
        protocol's group with members: NON_EMPTY_GROUP."""
        try:
            g = await self.existing(group_id)
        except Unavailable as exc:
            return exc.code, {}
        if g is None:
            return E.group_id_not_found, {}
        async with g.lock:
            if g.is_(GROUP_DEAD):
                return E.group_id_not_found, {}
            out: dict[tuple[str, int], ErrorCode] = {}
            if not g.is_(GROUP_EMPTY):
                if g.protocol_type != "consumer":
                    return E.non_empty_group, {}
                out = {tp: E.group_subscribed_to_topic for tp in partitions
                       if g.is_subscribed(tp[0])}
            lease = g.lease
        rest = [tp for tp in partitions if tp not in out]
        try:
            await self.run(self.metadata.delete_offsets, group_id, rest, lease)
        except GroupLeaseLostError as exc:
            self.drop(g, str(exc))
            return E.not_coordinator, {}
        for tp in rest:
            out[tp] = E.none
        return E.none, out

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group: only an empty one."""
        try:
            g = await self.existing(group_id)
        except Unavailable as exc:
            return exc.code
        if g is None:
            return E.group_id_not_found
        async with g.lock:
            if g.is_(GROUP_DEAD):
                return E.group_id_not_found
            if not g.is_(GROUP_EMPTY):
                return E.non_empty_group
            if g.last_store is not None:  # the store of its emptying lands first
                with contextlib.suppress(Exception):
                    await g.last_store
            try:
                await self.run(self.metadata.delete_group, group_id, g.lease)
            except UnknownGroupError:
                return E.group_id_not_found
            except GroupNotEmptyError:
                return E.non_empty_group
            except GroupLeaseLostError as exc:
                self.drop(g, str(exc))
                return E.not_coordinator
            self.drop(g, "deleted")
            return E.none

    # ------------------------------------------------------------------ DescribeGroups, ListGroups

    async def describe(self, group_id: str) -> tuple[ErrorCode, GroupRecord | None]:
        """DescribeGroups for one group: from memory if coordinated here, else as stored
        if nobody coordinates it (None: no such group, described as Dead), else
        NOT_COORDINATOR. As Kafka: member metadata and assignments only when Stable."""
        g = self.groups.get(group_id)
        if g is None:
            holder = await self.run(self.metadata.group_coordinator, group_id)
            if holder is not None and holder.agent_id != self.me():
                return E.not_coordinator, None
            if holder is not None:  # held by this agent's id: loaded (as at start)
                try:
                    g = await self._load_existing(group_id)
                except Unavailable as exc:
                    return exc.code, None
                if g is None:
                    return E.none, None
            elif (g := self.groups.get(group_id)) is None:
                record: GroupRecord | None = await self.run(self.metadata.load_group,
                                                            group_id)
                return E.none, record
        async with g.lock:
            return E.none, g.record(self._now_ms())

    async def listed(self, live: Sequence[AgentInfo]) -> list[GroupRecord]:
        """ListGroups: the groups coordinated here (those whose lease this agent's id holds
        but not yet loaded since its start: as they will load), and the stored ones nobody
        coordinates that FindCoordinator would send here (so clients asking every agent see
        each group once). Unavailable(COORDINATOR_NOT_AVAILABLE) before it registered."""
        me = self.me()
        if me is None:
            raise Unavailable(E.coordinator_not_available)
        self.adopt_soon()
        holders: dict[str, str] = await self.run(self.metadata.live_coordinators)
        stored: list[GroupRecord] = await self.run(self.metadata.list_groups)
        now = self._now_ms()
        out = {gid: g.record(now) for gid, g in self.groups.items()}
        for record in stored:
            if record.group_id in out:
                continue
            holder = holders.get(record.group_id)
            if holder == me:
                out[record.group_id] = as_loaded(record, now)
            elif holder is None and live and coordinator(record.group_id, live).agent_id == me:
                out[record.group_id] = record
        return [out[k] for k in sorted(out)]
