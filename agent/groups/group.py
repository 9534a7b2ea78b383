"""One consumer group as its coordinator holds it in memory (Kafka's ClassicGroup): members,
generation, state, deadlines, and the rules of Kafka's classic group protocol that read
it (protocol selection, the JoinGroup answer, the stored record). Plain data: no asyncio,
no I/O; a request waiting for an answer is a token (an int the effect runner maps to the
request), a deadline an epoch millisecond of the injected clock. transitions.py changes it.

States and their moves are Kafka's (ClassicGroupState): Empty → PreparingRebalance →
CompletingRebalance → Stable → PreparingRebalance …, any → Dead (deleted or no longer
coordinated here).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from metadata import GroupLease, GroupMember, GroupRecord
from metadata.models import (
    GROUP_COMPLETING_REBALANCE,
    GROUP_DEAD,
    GROUP_EMPTY,
    GROUP_PREPARING_REBALANCE,
    GROUP_STABLE,
)

__all__ = [
    "GROUP_COMPLETING_REBALANCE",
    "GROUP_DEAD",
    "GROUP_EMPTY",
    "GROUP_PREPARING_REBALANCE",
    "GROUP_STABLE",
    "Group",
    "JoinResult",
    "Member",
    "SyncResult",
    "as_loaded",
]


def as_loaded(record: GroupRecord, now_ms: int) -> GroupRecord:
    """The stored group as a coordinator loads it, as Kafka's (GroupMetadataManager's load
    and onGroupLoaded): Stable with its members if it was stored Stable with members (they
    go on heartbeating at their generation, or their sessions expire), else Empty at its
    generation (a rebalance under way when the last coordinator stopped starts afresh)."""
    if record.state == GROUP_STABLE and record.members:
        return record
    if record.state == GROUP_EMPTY and not record.members:
        return record
    return dataclasses.replace(record, state=GROUP_EMPTY, protocol_name=None, leader=None,
                               members=(), state_at_ms=now_ms)


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A JoinGroup answer. `members` (id, instance id, metadata) goes to the leader only."""

    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    """A SyncGroup answer: the member's assignment."""

    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(eq=False, slots=True)
class Member:
    """A member: who it is, its timeouts and assignment (`info`, the stored record's
    fields: one definition, metadata.GroupMember), the protocols it joined with, the
    tokens of its JoinGroup/SyncGroup waiting for an answer, and when its session expires
    (epoch ms)."""

    info: GroupMember
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    join: int | None = None
    sync: int | None = None
    deadline_ms: int = 0

    @property
    def member_id(self) -> str:
        return self.info.member_id

    @property
    def group_instance_id(self) -> str | None:
        return self.info.group_instance_id

    @property
    def session_timeout_ms(self) -> int:
        return self.info.session_timeout_ms

    @property
    def rebalance_timeout_ms(self) -> int:
        return self.info.rebalance_timeout_ms

    @property
    def assignment(self) -> bytes:
        return self.info.assignment

    @assignment.setter
    def assignment(self, value: bytes) -> None:
        self.info = dataclasses.replace(self.info, assignment=value)

    def metadata(self, protocol: str | None) -> bytes:
        """Its subscription metadata for `protocol` (empty if it has none)."""
        return next((m for name, m in self.protocols if name == protocol), b"")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether it would join with the same protocols and metadata again."""
        return self.protocols == protocols

    def waiting(self) -> bool:
        """Waiting for a JoinGroup or SyncGroup answer: as good as heartbeating (Kafka's
        MemberMetadata.hasSatisfiedHeartbeat)."""
        return self.join is not None or self.sync is not None

    def record(self, protocol: str | None) -> GroupMember:
        """As stored: with its metadata for the group's protocol."""
        return dataclasses.replace(self.info, metadata=self.metadata(protocol))

    def copy(self) -> Member:
        return dataclasses.replace(self)

    @classmethod
    def restored(cls, m: GroupMember, protocol_type: str | None,
                 protocol: str | None) -> Member:
        """A member of a group loaded from the store (after a coordinator moved)."""
        return cls(m, protocol_type or "", [(protocol or "", m.metadata)])


@dataclass(eq=False, slots=True)
class Group:
    """A group this agent coordinates under `lease`.

    `deadline_ms` is the deadline of the current phase (None when there is none): the end
    of the join phase in PreparingRebalance (of the initial rebalance delay while
    `initial_join`, `delay_left_ms` of the rebalance timeout then remaining), the end of
    the sync phase in CompletingRebalance. `pending` holds the member ids handed out with
    MEMBER_ID_REQUIRED, until when they may join."""

    group_id: str
    lease: GroupLease
    state: str = GROUP_EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    state_at_ms: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending: dict[str, int] = field(default_factory=dict)  # MEMBER_ID_REQUIRED id -> deadline
    pending_sync: set[str] = field(default_factory=set)
    deadline_ms: int | None = None
    delay_ms: int = 0  # group.initial.rebalance.delay.ms of the current initial join
    delay_left_ms: int = 0
    initial_join: bool = False  # in group.initial.rebalance.delay.ms
    new_member_added: bool = False

    @classmethod
    def loaded(cls, lease: GroupLease, record: GroupRecord | None, now_ms: int) -> Group:
        """The group from its `as_loaded` record (None: only offsets, Empty); its members'
        sessions start now."""
        g = cls(lease.group_id, lease)
        if record is None:
            return g
        g.state, g.generation, g.protocol_type = record.state, record.generation, \
            record.protocol_type
        g.protocol_name, g.leader, g.state_at_ms = record.protocol_name, record.leader, \
            record.state_at_ms
        for m in record.members:
            member = Member.restored(m, record.protocol_type, record.protocol_name)
            member.deadline_ms = now_ms + member.session_timeout_ms
            g.members[m.member_id] = member
            if m.group_instance_id:
                g.static[m.group_instance_id] = m.member_id
        return g

    def copy(self) -> Group:
        """A copy sharing nothing mutable with this one (transitions change the copy)."""
        return dataclasses.replace(
            self, members={k: m.copy() for k, m in self.members.items()},
            static=dict(self.static), pending=dict(self.pending),
            pending_sync=set(self.pending_sync))

    # ------------------------------------------------------------------ questions

    def is_(self, state: str) -> bool:
        return self.state == state

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's supportsProtocols: an empty group takes any non-empty protocol list;
        otherwise the type must match and one protocol must be among every member's."""
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return self.protocol_type in (None, protocol_type) or self.is_(GROUP_EMPTY)
        return protocol_type == self.protocol_type and bool(names & self.candidates())

    def candidates(self) -> set[str]:
        """The protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes wins (ties:
        the first member's preference order, as Kafka's vote)."""
        candidates = self.candidates()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(name for name, _ in m.protocols if name in candidates)] += 1
        return max(votes, key=lambda name: votes[name])

    def all_joined(self) -> bool:
        """Every member has a JoinGroup waiting and no MEMBER_ID_REQUIRED one is out."""
        return not self.pending and all(m.join is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members (Kafka's rebalanceTimeoutMs)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def next_deadline(self) -> int | None:
        """The earliest deadline of the group (phase, sessions, pending ids); None if none."""
        times = [m.deadline_ms for m in self.members.values()]
        times.extend(self.pending.values())
        if self.deadline_ms is not None:
            times.append(self.deadline_ms)
        return min(times, default=None) if not self.is_(GROUP_DEAD) else None

    def join_result(self, member: Member) -> JoinResult:
        """What `member` is answered at the current generation."""
        is_leader = member.member_id == self.leader
        members = tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                        for m in self.members.values()) if is_leader else ()
        return JoinResult(ErrorCode.none, member.member_id, self.generation,
                          self.protocol_type, self.protocol_name, self.leader or "", members)

    def record(self, now_ms: int, state: str | None = None) -> GroupRecord:
        """The group as it is stored (with `state` instead of its own, if given)."""
        state = state or self.state
        return GroupRecord(self.group_id, self.protocol_type, self.protocol_name,
                           self.generation, self.leader, state,
                           tuple(m.record(self.protocol_name) for m in self.members.values()),
                           now_ms if state != self.state else self.state_at_ms or now_ms)

    def is_subscribed(self, topic: str) -> bool:
        """Whether a member of this consumer group subscribes to `topic` (Kafka's
        isSubscribedToTopic: True when a subscription cannot be read)."""
        from .subscription import topics
        for m in self.members.values():
            subscribed = topics(m.metadata(self.protocol_name))
            if subscribed is None or topic in subscribed:
                return True
        return False
