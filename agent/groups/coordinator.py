"""The group coordinator of one `silt agent`: Kafka's classic GroupCoordinator on the event
loop, for the groups whose lease (metadata/groups.py) this agent holds. It is the effect
runner of transitions.py (the rules, pure): it loads groups, steps their events under
each group's lock, answers the waiting requests, stores the groups and wakes them at their
deadlines, every time read from the injected `Clock`. Committed offsets are offsets.py.

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

Deadlines (sessions, the join and sync phases, the initial rebalance delay, unused
MEMBER_ID_REQUIRED ids) are in the group's state, in the clock's epoch ms: the runner
wakes at the earliest (a loop timer only as the alarm; the clock decides what is due) and
steps a `Tick` under the group's lock. With a `ManualClock`, `tick()` fires what is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from kio.schema.errors import ErrorCode

from agent.config import AgentConfig
from agent.placement import coordinator
from clock import Clock
from metadata import (
    AgentInfo,
    GroupLease,
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

from .errors import UNSERVED, CoordinatorClosingError, CoordinatorNotRegisteredError
from .group import GROUP_DEAD, GROUP_EMPTY, Group, JoinResult, SyncResult, as_loaded
from .offsets import CommittedOffsets
from .transitions import (
    Drop,
    Event,
    Heartbeat,
    Join,
    JoinRequest,
    Leave,
    Note,
    Reply,
    Store,
    Sync,
    Tick,
    step,
)

__all__ = ["ADOPT_PAGE", "Codes", "Coordinator", "JoinRequest"]

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")
ADOPT_PAGE = 100  # groups loaded per transaction at start
Run = Callable[..., Awaitable[Any]]
# The one error table's lookup (agent/protocol/errors.py `error_code`): an exception's code.
Codes = Callable[[BaseException], ErrorCode]

E = ErrorCode


@dataclass(eq=False)
class Slot:
    """A group loaded here: its state (replaced at every step), the lock its steps take,
    its last store (stores run in order) and its alarm."""

    group: Group
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_store: asyncio.Future[None] | None = None
    alarm: asyncio.TimerHandle | None = None
    alarm_at: int | None = None


class Coordinator:
    """The groups this agent coordinates. `me()` is this agent's registry id (None before
    it registered); `run` runs blocking calls off the loop; `clock` (the metadata store's
    by default) times every deadline; `codes` answers what keeps a request from being
    served (errors.py, the metadata store's group errors) through the one error table."""

    def __init__(self, metadata: MetadataStore, config: AgentConfig, run: Run,
                 me: Callable[[], str | None], clock: Clock | None = None, *,
                 codes: Codes) -> None:
        self.metadata = metadata
        self.codes = codes
        self.config = config
        self.run = run
        self.me = me
        self.clock: Clock = clock if clock is not None else metadata.clock
        self.offsets = CommittedOffsets(self)
        self.groups: dict[str, Group] = {}  # the state of each loaded group
        self._slots: dict[str, Slot] = {}
        # Groups being loaded; None from a start-up load that did not load it (the waiter
        # loads it itself).
        self._loading: dict[str, asyncio.Future[Slot | None]] = {}
        self._waiting: dict[int, asyncio.Future[object]] = {}  # requests, by token
        self._tokens = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._adopting: asyncio.Task[None] | None = None
        self._adopted = False
        self._closed = False

    # ------------------------------------------------------------------ loading

    def loaded(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    async def group(self, group_id: str) -> Group:
        """The group, loaded here (taking its lease) if it is not yet; one of `UNSERVED`
        if it cannot be (GroupCoordinatedElsewhereError: another live agent coordinates
        it)."""
        return (await self.slot(group_id)).group

    async def existing(self, group_id: str) -> Group | None:
        """The group if it exists (coordinated here, stored, or with committed offsets),
        loaded here; None for a group nobody ever used — answered as Kafka answers an
        unknown group, without taking its lease. GroupCoordinatedElsewhereError if another
        live agent coordinates it."""
        slot = await self.existing_slot(group_id)
        return None if slot is None else slot.group

    async def slot(self, group_id: str) -> Slot:
        """`group`'s slot."""
        if (s := self._slots.get(group_id)) is not None:
            return s
        while (loading := self._loading.get(group_id)) is not None:
            if (s := await asyncio.shield(loading)) is not None:
                return s
        if (s := self._slots.get(group_id)) is not None:
            return s
        fut: asyncio.Future[Slot | None] = asyncio.get_running_loop().create_future()
        self._loading[group_id] = fut
        try:
            s = await self._load(group_id)
            fut.set_result(s)
            return s
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters re-raise it
            raise
        finally:
            del self._loading[group_id]

    async def existing_slot(self, group_id: str) -> Slot | None:
        """`existing`'s slot."""
        if (s := self._slots.get(group_id)) is not None:
            return s
        holder = await self.run(self.metadata.group_coordinator, group_id)
        if holder is not None and holder.agent_id != self.me():
            raise GroupCoordinatedElsewhereError(
                f"group {group_id!r} is coordinated by agent {holder.agent_id}",
                holder.agent_id)
        return await self._load_existing(group_id)

    async def _load_existing(self, group_id: str) -> Slot | None:
        """`existing_slot` once the holder is known to be this agent or nobody."""
        if (s := self._slots.get(group_id)) is not None:
            return s
        if await self.run(self.metadata.load_group, group_id) is None and \
                not await self.run(self.metadata.fetch_offsets, group_id):
            return None
        return await self.slot(group_id)

    async def _load(self, group_id: str) -> Slot:
        me = self.me()
        if self._closed:  # shutting down: clients go to another agent
            raise CoordinatorClosingError("this agent is shutting down")
        if me is None:
            raise CoordinatorNotRegisteredError("this agent has not registered yet")
        lease = await self.run(self.metadata.acquire_group, group_id, me)
        record: GroupRecord | None = await self.run(self.metadata.load_group, group_id)
        return await self._install(lease, record)

    async def _install(self, lease: GroupLease, stored: GroupRecord | None) -> Slot:
        """Coordinate the group from its stored record (Kafka's onGroupLoaded): restored
        members' sessions start now; a group stored mid-rebalance is stored again as
        Empty."""
        now = self.now_ms()
        record = None if stored is None else as_loaded(stored, now)
        s = Slot(Group.loaded(lease, record, now))
        if record is not stored:
            await self._store(s, s.group.record(now))
        self._slots[lease.group_id] = s
        self.groups[lease.group_id] = s.group
        self._set_alarm(s)
        g = s.group
        log.info("coordinating group %r (lease epoch %d, generation %d, %s)", g.group_id,
                 lease.epoch, g.generation, g.state)
        return s

    def drop(self, s: Slot, why: str) -> None:
        """Stop coordinating the group here (lease lost, deleted, shutdown): every waiting
        member is answered NOT_COORDINATOR and looks the coordinator up again."""
        gid = s.group.group_id
        if self._slots.get(gid) is s:
            del self._slots[gid]
            del self.groups[gid]
        if not s.group.is_(GROUP_DEAD):
            self.apply_now(s, Drop(why))

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
                    me, [gid for gid in page if gid not in self._slots
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
        futs: dict[str, asyncio.Future[Slot | None]] = {
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
        if not self._slots:
            return
        before = dict(self._slots)  # groups loaded later took their lease after the read
        held: dict[str, int] = await self.run(self.metadata.held_groups, me)
        for group_id, s in before.items():
            if self._slots.get(group_id) is s and held.get(group_id) != s.group.lease.epoch:
                self.drop(s, "lease taken over")

    def close(self) -> None:
        """Stop coordinating (shutdown): waiting members are answered NOT_COORDINATOR and
        no group is loaded from now on."""
        self._closed = True
        for s in list(self._slots.values()):
            self.drop(s, "shutting down")
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------------ the effect runner

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _store(self, s: Slot, record: GroupRecord) -> asyncio.Future[None]:
        """Store `record` after the group's earlier stores (in order); a lost lease drops
        the group. The caller may await the result (it raises what the store raised)."""
        prev = s.last_store
        g = s.group

        async def write() -> None:
            if prev is not None:
                with contextlib.suppress(Exception):
                    await prev
            await self.run(self.metadata.store_group, g.lease, record)

        fut = asyncio.ensure_future(write())
        s.last_store = fut

        def done(f: asyncio.Future[None]) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if isinstance(exc, GroupLeaseLostError):
                self.drop(s, str(exc))
            elif exc is not None:
                log.warning("group %r: storing generation %d failed: %s", g.group_id,
                            record.generation, exc)

        fut.add_done_callback(done)
        return fut

    async def ask(self, s: Slot, event: Callable[[int], Event]) -> object:
        """Step `event` (given its token) under the group's lock; its answer."""
        token, answer = self._ticket()
        async with s.lock:
            await self.apply(s, event(token))
        return await answer

    def _ticket(self) -> tuple[int, asyncio.Future[object]]:
        """A token for a request and the future its answer completes."""
        token = next(self._tokens)
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._waiting[token] = fut
        fut.add_done_callback(lambda _: self._waiting.pop(token, None))
        return token, fut

    def _answer(self, token: int, result: object) -> None:
        fut = self._waiting.pop(token, None)
        if fut is not None and not fut.done():
            fut.set_result(result)

    async def apply(self, s: Slot, event: Event) -> None:
        """Step `event` (the caller holds the group's lock) and carry out its effects: the
        awaited store first (if it fails, the step is dropped and its failure stepped)."""
        new, effects = step(s.group, event, self.now_ms())
        awaited = next((e for e in effects if isinstance(e, Store) and e.awaited), None)
        if awaited is not None:
            try:
                await self._store(s, awaited.record)
            except Exception as exc:
                lost = isinstance(exc, GroupLeaseLostError)
                if lost:
                    self.drop(s, str(exc))
                elif isinstance(event, Join):
                    log.error("group %r: JoinGroup failed: %s", s.group.group_id, exc)
                assert awaited.failure is not None
                await self.apply(s, dataclasses.replace(
                    awaited.failure,
                    code=self.codes(exc) if lost else E.coordinator_not_available))
                return
            if s.group.is_(GROUP_DEAD):  # dropped while storing: answer what the step left
                self._commit(s, new, [e for e in effects if e is not awaited])
                self.apply_now(s, Drop("dropped while storing"))
                return
        self._commit(s, new, [e for e in effects if e is not awaited])

    def apply_now(self, s: Slot, event: Event) -> None:
        """Step an event that stores nothing awaited (a drop), at once."""
        new, effects = step(s.group, event, self.now_ms())
        assert not any(isinstance(e, Store) and e.awaited for e in effects)
        self._commit(s, new, effects)

    def _commit(self, s: Slot, new: Group, effects: Sequence[object]) -> None:
        s.group = new
        if self._slots.get(new.group_id) is s:
            self.groups[new.group_id] = new
        for effect in effects:
            match effect:
                case Reply():
                    self._answer(effect.token, effect.result)
                case Store():
                    self._store(s, effect.record)
                case Note():
                    log.log(effect.level, "%s", effect.text)
        self._set_alarm(s)

    def _set_alarm(self, s: Slot) -> None:
        """Wake at the group's earliest deadline (if an alarm set earlier does not ring
        before it: it sets the next one then)."""
        due = s.group.next_deadline() if self._slots.get(s.group.group_id) is s else None
        if due is None:
            if s.alarm is not None:
                s.alarm.cancel()
                s.alarm, s.alarm_at = None, None
            return
        if s.alarm is not None and s.alarm_at is not None and s.alarm_at <= due:
            return
        if s.alarm is not None:
            s.alarm.cancel()
        delay_s = max(0, due - self.now_ms()) / 1000
        s.alarm, s.alarm_at = asyncio.get_running_loop().call_later(
            delay_s, self._ring, s), due

    def _ring(self, s: Slot) -> None:
        s.alarm, s.alarm_at = None, None
        self._spawn(self._tick(s))

    async def _tick(self, s: Slot) -> None:
        async with s.lock:
            due = s.group.next_deadline()
            if self._slots.get(s.group.group_id) is not s:
                return
            if due is not None and due <= self.now_ms():
                await self.apply(s, Tick())
            else:
                self._set_alarm(s)

    async def tick(self) -> None:
        """Fire every deadline due by the clock now (what the alarms do; a test on a
        ManualClock calls it after moving time)."""
        for s in list(self._slots.values()):
            await self._tick(s)

    async def _serve(self, group_id: str, event: Callable[[int], Event],
                     failed: Callable[[ErrorCode], R], absent: R | None = None, *,
                     create: bool = False) -> R:
        """The prologue and epilogue of a group request: the group (loaded here if need
        be; `absent` if it does not exist, unless `create`), the error code of a group
        that cannot be served here, the event stepped under the group's lock, and its
        answer (which may wait for a rebalance)."""
        try:
            s = await (self.slot(group_id) if create else self.existing_slot(group_id))
            if s is None:
                assert absent is not None
                return absent
            answer = self.ask(s, event)
            return cast(R, await answer)
        except (*UNSERVED, GroupLeaseLostError) as exc:
            return failed(self.codes(exc))

    # ------------------------------------------------------------------ requests

    async def join(self, req: JoinRequest) -> JoinResult:
        """Answer a JoinGroup (waits for the rebalance to complete)."""
        if not req.group_id:
            return JoinResult(E.invalid_group_id, req.member_id)
        if not self.config.group_min_session_timeout_ms <= req.who.session_timeout_ms \
                <= self.config.group_max_session_timeout_ms:
            return JoinResult(E.invalid_session_timeout, req.member_id)
        new_id = f"{req.who.client_id}-{uuid.uuid4()}"
        delay = self.config.group_initial_rebalance_delay_ms
        try:
            return await self._serve(
                req.group_id, lambda token: Join(token, req, new_id, delay),
                lambda code: JoinResult(code, req.member_id), create=True)
        except Exception:
            log.exception("group %r: JoinGroup failed", req.group_id)
            return JoinResult(E.coordinator_not_available, req.member_id)

    async def sync(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None,
                   assignments: Sequence[tuple[str, bytes]]) -> SyncResult:
        """Answer a SyncGroup (a follower waits for the leader's assignment)."""
        return await self._serve(
            group_id, lambda token: Sync(token, generation, member_id, instance_id,
                                         protocol_type, protocol_name, tuple(assignments)),
            SyncResult, SyncResult(E.unknown_member_id))

    async def heartbeat(self, group_id: str, generation: int, member_id: str,
                        instance_id: str | None) -> ErrorCode:
        return await self._serve(
            group_id, lambda token: Heartbeat(token, generation, member_id, instance_id),
            lambda code: code, E.unknown_member_id)

    async def leave(self, group_id: str,
                    members: Sequence[tuple[str, str | None]]) -> tuple[ErrorCode,
                                                                        list[ErrorCode]]:
        """LeaveGroup: (top-level error, one error per (member id, instance id))."""
        return await self._serve(
            group_id, lambda token: Leave(token, tuple(members)), lambda code: (code, []),
            (E.none, [E.unknown_member_id] * len(members)))

    async def commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None,
                     offsets: Sequence[OffsetCommit]) -> dict[tuple[str, int], ErrorCode]:
        """OffsetCommit (offsets.py)."""
        return await self.offsets.commit(group_id, generation, member_id, instance_id,
                                         offsets)

    async def delete_offsets(self, group_id: str, partitions: Sequence[tuple[str, int]]
                             ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (offsets.py)."""
        return await self.offsets.delete(group_id, partitions)

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group: only an empty one."""
        try:
            s = await self.existing_slot(group_id)
        except UNSERVED as exc:
            return self.codes(exc)
        if s is None:
            return E.group_id_not_found
        async with s.lock:
            if s.group.is_(GROUP_DEAD):
                return E.group_id_not_found
            if not s.group.is_(GROUP_EMPTY):
                return E.non_empty_group
            if s.last_store is not None:  # the store of its emptying lands first
                with contextlib.suppress(Exception):
                    await s.last_store
            try:
                await self.run(self.metadata.delete_group, group_id, s.group.lease)
            except (UnknownGroupError, GroupNotEmptyError) as exc:
                return self.codes(exc)
            except GroupLeaseLostError as exc:
                self.drop(s, str(exc))
                return self.codes(exc)
            self.drop(s, "deleted")
            return E.none

    # ------------------------------------------------------------------ DescribeGroups, ListGroups

    async def describe(self, group_id: str) -> tuple[ErrorCode, GroupRecord | None]:
        """DescribeGroups for one group: from memory if coordinated here, else as stored
        if nobody coordinates it (None: no such group, described as Dead), else
        NOT_COORDINATOR. As Kafka: member metadata and assignments only when Stable."""
        s = self._slots.get(group_id)
        if s is None:
            holder = await self.run(self.metadata.group_coordinator, group_id)
            if holder is not None and holder.agent_id != self.me():
                return E.not_coordinator, None
            if holder is not None:  # held by this agent's id: loaded (as at start)
                try:
                    s = await self._load_existing(group_id)
                except UNSERVED as exc:
                    return self.codes(exc), None
                if s is None:
                    return E.none, None
            elif (s := self._slots.get(group_id)) is None:
                record: GroupRecord | None = await self.run(self.metadata.load_group,
                                                            group_id)
                return E.none, record
        async with s.lock:
            return E.none, s.group.record(self.now_ms())

    async def listed(self, live: Sequence[AgentInfo]) -> list[GroupRecord]:
        """ListGroups: the groups coordinated here (those whose lease this agent's id holds
        but not yet loaded since its start: as they will load), and the stored ones nobody
        coordinates that FindCoordinator would send here (so clients asking every agent see
        each group once). CoordinatorNotRegisteredError before it registered."""
        me = self.me()
        if me is None:
            raise CoordinatorNotRegisteredError("this agent has not registered yet")
        self.adopt_soon()
        holders: dict[str, str] = await self.run(self.metadata.live_coordinators)
        stored: list[GroupRecord] = await self.run(self.metadata.list_groups)
        now = self.now_ms()
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
