"""The classic group protocol as pure transitions: `step(group, event, now) -> (group,
effects)`, Kafka's GroupCoordinator (3.x) handlers and ClassicGroup moves without the I/O.

`step` never changes the group it is given (it returns a changed copy), never waits, never
reads a clock (`now` is the injected clock's epoch ms), never does I/O: what must happen
outside is returned as effects, which the coordinator's runner carries out in order:

- `Reply(token, result)`: answer the request waiting under `token` (the runner's handle on
  a JoinGroup, SyncGroup, ... in flight; the state keeps the tokens of the members' waiting
  JoinGroup and SyncGroup);
- `Store(record)`: store the group (fenced by its lease), in order with the group's earlier
  stores. An `awaited` store (at most one per step) is made before anything else of the
  step: if it fails, the step never happened (the runner keeps the group it had) and
  `failure`, given the error code, is stepped instead;
- `Note(text)`: something to log.

Deadlines live in the state (a member's session, the join and sync phases, the ids handed
out with MEMBER_ID_REQUIRED); `Group.next_deadline` says when the runner must step a `Tick`.
Error codes are checked in Kafka's order (validateCurrentMember, validateSyncGroup,
validateHeartbeat, validateOffsetCommit ...). The transaction coordinator follows the same
pattern.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from metadata import GroupMember, GroupRecord

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
)

E = ErrorCode

# ------------------------------------------------------------------ events


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


@dataclass(frozen=True, slots=True)
class Join:
    """A JoinGroup (answered JoinResult). `new_id` is the id a new member gets;
    `initial_delay_ms` is group.initial.rebalance.delay.ms."""

    token: int
    req: JoinRequest
    new_id: str
    initial_delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class Sync:
    """A SyncGroup (answered SyncResult)."""

    token: int
    generation: int
    member_id: str
    instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A Heartbeat (answered ErrorCode)."""

    token: int
    generation: int
    member_id: str
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Leave:
    """A LeaveGroup of (member id, instance id)s (answered (ErrorCode, [ErrorCode]))."""

    token: int
    members: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class CommitCheck:
    """Whether an OffsetCommit may be stored (answered ErrorCode; the offsets themselves
    are stored by offsets.py)."""

    token: int
    generation: int
    member_id: str
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: whatever deadline is due fires."""


@dataclass(frozen=True, slots=True)
class Drop:
    """The group is no longer coordinated here (lease lost, deleted, shutdown): every
    waiting request is answered NOT_COORDINATOR (Kafka's onGroupUnloaded)."""

    why: str


@dataclass(frozen=True, slots=True)
class JoinNotStored:
    """The store a JoinGroup needed failed (`code`): it is answered with it."""

    token: int
    member_id: str
    code: ErrorCode = E.none


@dataclass(frozen=True, slots=True)
class AssignmentNotStored:
    """The leader's assignment could not be stored (`code`): the group rebalances."""

    token: int
    code: ErrorCode = E.none


Event = (Join | Sync | Heartbeat | Leave | CommitCheck | Tick | Drop | JoinNotStored
         | AssignmentNotStored)

# ------------------------------------------------------------------ effects


@dataclass(frozen=True, slots=True)
class Reply:
    token: int
    result: object


@dataclass(frozen=True, slots=True)
class Store:
    record: GroupRecord
    awaited: bool = False
    failure: JoinNotStored | AssignmentNotStored | None = None


@dataclass(frozen=True, slots=True)
class Note:
    text: str
    level: int = logging.INFO


Effect = Reply | Store | Note

# ------------------------------------------------------------------ step


def step(group: Group, event: Event, now: int) -> tuple[Group, list[Effect]]:
    """The group after `event` at `now` (epoch ms), and what must happen outside."""
    t = _Step(group.copy(), now)
    match event:
        case Join():
            t.join(event)
        case Sync():
            t.sync(event)
        case Heartbeat():
            t.reply(event.token, t.heartbeat(event))
        case Leave():
            t.leave(event)
        case CommitCheck():
            t.reply(event.token, t.commit_allowed(event))
        case Tick():
            t.tick()
        case Drop():
            t.drop(event.why)
        case JoinNotStored():
            t.reply(event.token, JoinResult(event.code, event.member_id))
        case AssignmentNotStored():
            t.assignment_not_stored(event)
    return t.g, t.effects


def check_member(g: Group, member_id: str, instance_id: str | None) -> Member | ErrorCode:
    """Kafka's validateCurrentMember: the member, or UNKNOWN_MEMBER_ID /
    FENCED_INSTANCE_ID."""
    if instance_id:
        known = g.static.get(instance_id)
        if known is not None and known != member_id:
            return E.fenced_instance_id
    m = g.members.get(member_id)
    if m is None:
        return E.unknown_member_id
    if m.group_instance_id and instance_id is not None and m.group_instance_id != instance_id:
        return E.fenced_instance_id
    return m


def offsets_deletable(g: Group, partitions: Sequence[tuple[str, int]]
                      ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """OffsetDelete's checks (Kafka's handleDeleteOffsets): any partition of an empty
    group; of a consumer group with members, those of topics it does not subscribe to;
    another protocol's group with members: NON_EMPTY_GROUP. The refused partitions."""
    if g.is_(GROUP_DEAD):
        return E.group_id_not_found, {}
    if g.is_(GROUP_EMPTY):
        return E.none, {}
    if g.protocol_type != "consumer":
        return E.non_empty_group, {}
    return E.none, {tp: E.group_subscribed_to_topic for tp in partitions
                    if g.is_subscribed(tp[0])}


class _Step:
    """One transition: the group being changed and the effects so far."""

    def __init__(self, g: Group, now: int) -> None:
        self.g = g
        self.now = now
        self.effects: list[Effect] = []

    # ------------------------------------------------------------------ helpers

    def reply(self, token: int | None, result: object) -> None:
        if token is not None:
            self.effects.append(Reply(token, result))

    def note(self, text: str, level: int = logging.INFO) -> None:
        self.effects.append(Note(f"group {self.g.group_id!r}: {text}", level))

    def answer_join(self, m: Member, result: JoinResult) -> None:
        self.reply(m.join, result)
        m.join = None

    def answer_sync(self, m: Member, result: SyncResult) -> None:
        self.reply(m.sync, result)
        m.sync = None

    def heard_from(self, m: Member) -> None:
        """Push the member's session deadline out (a heartbeat, join, sync or commit)."""
        m.deadline_ms = self.now + m.session_timeout_ms

    def remove(self, m: Member) -> None:
        """Take `m` out of the group (no rebalance decided here)."""
        g = self.g
        g.members.pop(m.member_id, None)
        if m.group_instance_id and g.static.get(m.group_instance_id) == m.member_id:
            del g.static[m.group_instance_id]
        g.pending_sync.discard(m.member_id)
        self.answer_join(m, JoinResult(E.unknown_member_id, m.member_id))
        self.answer_sync(m, SyncResult(E.unknown_member_id))
        if g.leader == m.member_id:
            g.leader = next(iter(g.members), None)

    def remove_and_rebalance(self, m: Member) -> None:
        self.remove(m)
        if self.g.state in (GROUP_STABLE, GROUP_COMPLETING_REBALANCE):
            self.prepare_rebalance()
        elif self.g.is_(GROUP_PREPARING_REBALANCE):
            self.maybe_complete_join()

    # ------------------------------------------------------------------ rebalances

    def prepare_rebalance(self, initial_delay_ms: int = 0,
                          failure: JoinNotStored | None = None) -> None:
        """Start a rebalance (Kafka's prepareRebalance). From Empty, the group is stored
        first (awaited: if that fails, nothing changed)."""
        g, now = self.g, self.now
        was_empty = g.is_(GROUP_EMPTY)
        if was_empty:
            self.effects.append(Store(g.record(now, GROUP_PREPARING_REBALANCE), True, failure))
        if g.is_(GROUP_COMPLETING_REBALANCE):
            for m in g.members.values():
                self.answer_sync(m, SyncResult(E.rebalance_in_progress))
            g.pending_sync.clear()
        g.state, g.state_at_ms = GROUP_PREPARING_REBALANCE, now
        timeout = g.rebalance_timeout_ms()
        if was_empty and initial_delay_ms > 0:
            g.initial_join, g.new_member_added, g.delay_ms = True, False, initial_delay_ms
            first = min(initial_delay_ms, timeout)
            g.deadline_ms, g.delay_left_ms = now + first, timeout - first
        else:
            g.initial_join = False
            g.deadline_ms = now + timeout
            self.maybe_complete_join()  # e.g. the last member left: Empty at once

    def maybe_complete_join(self) -> None:
        g = self.g
        if g.is_(GROUP_PREPARING_REBALANCE) and not g.initial_join and g.all_joined():
            self.complete_join()

    def complete_join(self) -> None:
        """End the join phase: members that did not rejoin are removed, the generation
        moves on, every waiting JoinGroup is answered (the leader with the members)."""
        g, now = self.g, self.now
        g.deadline_ms = None
        for m in [m for m in g.members.values() if m.join is None]:
            self.note(f"member {m.member_id} did not rejoin in time")
            self.remove(m)
        g.generation += 1
        g.state_at_ms = now
        if not g.members:
            g.state, g.protocol_name, g.leader = GROUP_EMPTY, None, None
            self.effects.append(Store(g.record(now)))
            self.note(f"generation {g.generation} is empty")
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.protocol_name = g.select_protocol()
        g.state = GROUP_COMPLETING_REBALANCE
        for m in g.members.values():
            self.answer_join(m, g.join_result(m))
            self.heard_from(m)
        g.pending_sync = set(g.members)
        g.deadline_ms = now + g.rebalance_timeout_ms()
        self.note(f"generation {g.generation} with {len(g.members)} member(s), "
                  f"protocol {g.protocol_name}")

    # ------------------------------------------------------------------ timers

    def tick(self) -> None:
        """Fire what is due: ids handed out with MEMBER_ID_REQUIRED that were not used,
        sessions (a member waiting for a JoinGroup or SyncGroup answer is heard from), the
        join phase (initial delay, rebalance timeout) and the sync phase."""
        g, now = self.g, self.now
        if g.is_(GROUP_DEAD):
            return
        unused = [mid for mid, deadline in g.pending.items() if deadline <= now]
        for mid in unused:
            del g.pending[mid]
        if unused:
            self.maybe_complete_join()
        expired = []
        for m in g.members.values():
            if m.deadline_ms <= now:
                if m.waiting():
                    self.heard_from(m)
                else:
                    expired.append(m)
        for m in expired:
            if g.members.get(m.member_id) is m:
                self.note(f"member {m.member_id} session timed out")
                self.remove_and_rebalance(m)
        if g.deadline_ms is None or g.deadline_ms > now:
            return
        if g.is_(GROUP_PREPARING_REBALANCE) and g.initial_join:
            if g.new_member_added and g.delay_left_ms > 0:  # more are coming: wait again
                g.new_member_added = False
                wait = min(g.delay_ms, g.delay_left_ms)
                g.deadline_ms, g.delay_left_ms = now + wait, g.delay_left_ms - wait
                return
            g.initial_join = False
            self.complete_join()
        elif g.is_(GROUP_PREPARING_REBALANCE):
            self.complete_join()
        elif g.is_(GROUP_COMPLETING_REBALANCE):
            for member_id in list(g.pending_sync):
                if (late := g.members.get(member_id)) is not None:
                    self.note(f"member {member_id} did not sync in time")
                    self.remove(late)
            self.prepare_rebalance()
        else:
            g.deadline_ms = None

    def drop(self, why: str) -> None:
        g = self.g
        g.state = GROUP_DEAD
        for m in g.members.values():
            self.answer_join(m, JoinResult(E.not_coordinator, m.member_id))
            self.answer_sync(m, SyncResult(E.not_coordinator))
        g.pending.clear()
        g.deadline_ms = None
        self.note(f"no longer coordinated here ({why})")

    # ------------------------------------------------------------------ JoinGroup

    def join(self, ev: Join) -> None:
        g, req = self.g, ev.req
        if g.is_(GROUP_DEAD):
            return self.reply(ev.token, JoinResult(E.coordinator_not_available, req.member_id))
        if not g.supports(req.protocol_type, req.protocols):
            return self.reply(ev.token, JoinResult(E.inconsistent_group_protocol,
                                                   req.member_id))
        if req.member_id:
            return self.join_known(ev)
        if req.group_instance_id and req.group_instance_id in g.static:
            return self.replace_static(ev)
        if req.require_known_member_id and not req.group_instance_id:
            g.pending[ev.new_id] = self.now + req.who.session_timeout_ms
            return self.reply(ev.token, JoinResult(E.member_id_required, ev.new_id))
        return self.add_member(ev, ev.new_id)

    def add_member(self, ev: Join, member_id: str) -> None:
        g, req = self.g, ev.req
        g.pending.pop(member_id, None)
        m = Member(req.member(member_id), req.protocol_type, req.protocols, join=ev.token)
        first = not g.members
        g.members[member_id] = m
        if req.group_instance_id:
            g.static[req.group_instance_id] = member_id
        if first:
            g.protocol_type = req.protocol_type
            g.leader = member_id
        g.new_member_added = True
        self.heard_from(m)
        if g.state in (GROUP_EMPTY, GROUP_STABLE, GROUP_COMPLETING_REBALANCE):
            self.prepare_rebalance(ev.initial_delay_ms,
                                   JoinNotStored(ev.token, req.member_id))
        self.maybe_complete_join()

    def replace_static(self, ev: Join) -> None:
        """A static member rejoining under a new member id (Kafka's
        updateStaticMemberAndRebalance): the old id is fenced. In Stable, if the group's
        protocol would stay the same, the group is stored with the new id and the member
        gets its old assignment back without a rebalance; otherwise the group rebalances."""
        g, req, new_id = self.g, ev.req, ev.new_id
        instance = req.group_instance_id or ""
        old_id = g.static[instance]
        old = g.members[old_id]
        self.answer_join(old, JoinResult(E.fenced_instance_id, old_id))
        self.answer_sync(old, SyncResult(E.fenced_instance_id))
        old_leader = g.leader
        m = Member(req.member(new_id, old.assignment), req.protocol_type, req.protocols)
        del g.members[old_id]
        g.members[new_id] = m
        g.static[instance] = new_id
        if g.leader == old_id:
            g.leader = new_id
        g.pending_sync.discard(old_id)
        self.heard_from(m)
        if g.is_(GROUP_STABLE) and g.select_protocol() == g.protocol_name:
            self.effects.append(Store(g.record(self.now), True,
                                      JoinNotStored(ev.token, req.member_id)))
            skip = g.leader == new_id and req.supports_skip_assignment
            result = g.join_result(m)
            # An older leader is told the old leader id, so it does not assign (KIP-814
            # clients are told to skip assigning instead): the assignment stays as it is.
            return self.reply(ev.token, JoinResult(
                result.error, new_id, result.generation, result.protocol_type,
                result.protocol_name, result.leader if skip else (old_leader or ""),
                result.members if skip else (), skip_assignment=skip))
        m.join = ev.token
        if g.state in (GROUP_STABLE, GROUP_COMPLETING_REBALANCE):
            self.prepare_rebalance()
        self.maybe_complete_join()

    def join_known(self, ev: Join) -> None:
        g, req = self.g, ev.req
        if req.member_id in g.pending:
            return self.add_member(ev, req.member_id)
        checked = check_member(g, req.member_id, req.group_instance_id)
        if isinstance(checked, ErrorCode):
            return self.reply(ev.token, JoinResult(checked, req.member_id))
        m = checked
        if g.state in (GROUP_EMPTY, GROUP_DEAD):
            return self.reply(ev.token, JoinResult(E.unknown_member_id, req.member_id))
        self.heard_from(m)
        if g.is_(GROUP_COMPLETING_REBALANCE) and m.matches(req.protocols):
            return self.reply(ev.token, g.join_result(m))  # it missed the answer: again
        if g.is_(GROUP_STABLE) and m.member_id != g.leader and m.matches(req.protocols):
            return self.reply(ev.token, g.join_result(m))  # a follower with nothing new
        # a JoinGroup of its was already waiting: this one replaces it
        self.answer_join(m, JoinResult(E.rebalance_in_progress, m.member_id))
        m.protocols = req.protocols
        m.info = req.member(m.member_id, m.assignment)
        m.join = ev.token
        if g.state in (GROUP_STABLE, GROUP_COMPLETING_REBALANCE):
            self.prepare_rebalance()
        self.maybe_complete_join()

    # ------------------------------------------------------------------ SyncGroup

    def sync(self, ev: Sync) -> None:
        g = self.g
        if g.is_(GROUP_DEAD):
            return self.reply(ev.token, SyncResult(E.coordinator_not_available))
        checked = check_member(g, ev.member_id, ev.instance_id)
        if isinstance(checked, ErrorCode):
            return self.reply(ev.token, SyncResult(checked))
        m = checked
        if ev.generation != g.generation:
            return self.reply(ev.token, SyncResult(E.illegal_generation))
        if (ev.protocol_type is not None and ev.protocol_type != g.protocol_type) or \
                (ev.protocol_name is not None and ev.protocol_name != g.protocol_name):
            return self.reply(ev.token, SyncResult(E.inconsistent_group_protocol))
        if g.is_(GROUP_EMPTY):
            return self.reply(ev.token, SyncResult(E.unknown_member_id))
        if g.is_(GROUP_PREPARING_REBALANCE):
            return self.reply(ev.token, SyncResult(E.rebalance_in_progress))
        self.heard_from(m)
        if g.is_(GROUP_STABLE):
            return self.reply(ev.token, SyncResult(E.none, g.protocol_type, g.protocol_name,
                                                   m.assignment))
        # CompletingRebalance
        self.answer_sync(m, SyncResult(E.rebalance_in_progress))
        m.sync = ev.token
        g.pending_sync.discard(ev.member_id)
        if ev.member_id != g.leader:
            return None
        given = dict(ev.assignments)
        for other in g.members.values():
            other.assignment = given.get(other.member_id, b"")
        self.effects.append(Store(g.record(self.now, GROUP_STABLE), True,
                                  AssignmentNotStored(ev.token)))
        g.state, g.state_at_ms, g.deadline_ms = GROUP_STABLE, self.now, None
        g.pending_sync.clear()
        for other in g.members.values():
            self.answer_sync(other, SyncResult(E.none, g.protocol_type, g.protocol_name,
                                               other.assignment))
        return None

    def assignment_not_stored(self, ev: AssignmentNotStored) -> None:
        g = self.g
        if ev.code is E.not_coordinator or g.is_(GROUP_DEAD):
            return self.reply(ev.token, SyncResult(ev.code))
        self.note("the assignment could not be stored", logging.WARNING)
        for other in g.members.values():
            other.assignment = b""
            self.answer_sync(other, SyncResult(E.coordinator_not_available))
        self.reply(ev.token, SyncResult(E.coordinator_not_available))
        if g.is_(GROUP_COMPLETING_REBALANCE):
            self.prepare_rebalance()
        return None

    # ------------------------------------------------------------------ Heartbeat, LeaveGroup

    def heartbeat(self, ev: Heartbeat) -> ErrorCode:
        g = self.g
        if g.is_(GROUP_DEAD):
            return E.coordinator_not_available
        checked = check_member(g, ev.member_id, ev.instance_id)
        if isinstance(checked, ErrorCode):
            return checked
        if g.is_(GROUP_EMPTY):
            return E.unknown_member_id
        if ev.generation != g.generation:
            return E.illegal_generation
        self.heard_from(checked)
        if g.is_(GROUP_PREPARING_REBALANCE):
            return E.rebalance_in_progress
        return E.none

    def leave(self, ev: Leave) -> None:
        g = self.g
        if g.is_(GROUP_DEAD):
            return self.reply(ev.token, (E.coordinator_not_available, []))
        out: list[ErrorCode] = []
        for member_id, instance_id in ev.members:
            if not member_id and instance_id:  # a static member leaving by instance
                member_id = g.static.get(instance_id, "")
            if member_id in g.pending:
                del g.pending[member_id]
                self.maybe_complete_join()
                out.append(E.none)
                continue
            checked = check_member(g, member_id, instance_id)
            if isinstance(checked, ErrorCode):
                out.append(checked)
                continue
            self.note(f"member {member_id} left")
            self.remove_and_rebalance(checked)
            out.append(E.none)
        return self.reply(ev.token, (E.none, out))

    # ------------------------------------------------------------------ OffsetCommit

    def commit_allowed(self, ev: CommitCheck) -> ErrorCode:
        """Kafka's doCommitOffsets checks, in its order."""
        g = self.g
        if g.is_(GROUP_DEAD):
            return E.coordinator_not_available
        if ev.instance_id and g.static.get(ev.instance_id, ev.member_id) != ev.member_id:
            return E.fenced_instance_id
        if ev.generation < 0 and g.is_(GROUP_EMPTY):
            return E.none  # the group only stores offsets ("simple" consumers)
        m = g.members.get(ev.member_id)
        if m is None:
            return E.unknown_member_id
        if ev.generation != g.generation:
            return E.illegal_generation
        if g.is_(GROUP_COMPLETING_REBALANCE):
            return E.rebalance_in_progress
        self.heard_from(m)
        return E.none
