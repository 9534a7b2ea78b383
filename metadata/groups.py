"""Consumer groups: which agent coordinates each group (a fenced lease), the group as its
coordinator last stored it, and committed offsets.

The lease of a group names an agent and an epoch. It is valid while that agent is live in
the agent registry (agents.py), so an agent's one registry heartbeat renews every group it
coordinates, and a crashed agent's groups can be taken over once its session times out
(a cleanly stopped agent's at once). A takeover bumps the epoch; every write a coordinator
makes (`store_group`, `commit_offsets`, `delete_offsets`, `delete_group`) checks its epoch
under the lease row's lock in the same transaction, so a paused former coordinator writes
nothing after a takeover (GroupLeaseLostError: it drops the group, clients are told
NOT_COORDINATOR and look it up again).

Each call is one transaction. A crash before COMMIT leaves nothing of it; the clients retry
(an OffsetCommit without an answer is sent again, and a group not stored is rebalanced
again by the next coordinator).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from . import leases
from . import schema as s
from .engine import Database
from .errors import (
    GroupCoordinatedElsewhereError,
    GroupLeaseLostError,
    GroupNotEmptyError,
    UnknownGroupError,
    UnknownPartitionError,
    UnknownTopicError,
)
from .models import (
    GROUP_DEAD,
    GROUP_EMPTY,
    AgentInfo,
    CommittedOffset,
    GroupLease,
    GroupMember,
    GroupRecord,
    OffsetCommit,
    PartitionLag,
)

_BYTES_FIELDS = ("metadata", "assignment")
OFFSET_KEY = ("group_id", "topic", "partition")


# ------------------------------------------------------------------ leases


GROUP_LEASES = leases.LeaseKind(s.group_coordinators, "group_id", "group",
                                GroupCoordinatedElsewhereError, GroupLeaseLostError)
_live_agents = leases.live_agents


def group_coordinator(db: Database, group_id: str) -> AgentInfo | None:
    """The live agent coordinating `group_id`, or None (nobody, or its holder is not live)."""
    return leases.holder(db, GROUP_LEASES, group_id)


def acquire_group(db: Database, group_id: str, agent_id: str) -> GroupLease:
    """Make `agent_id` the coordinator of `group_id` with a new epoch (fencing any earlier
    holder, this agent's own earlier incarnations included); GroupCoordinatedElsewhereError
    if another agent holds it and is live (leases.acquire)."""
    return GroupLease(group_id, agent_id, leases.acquire(db, GROUP_LEASES, group_id, agent_id))


def held_groups(db: Database, agent_id: str) -> dict[str, int]:
    """The groups whose lease `agent_id` holds, with their epochs (an agent drops the groups
    it has loaded that are no longer among them)."""
    return leases.held(db, GROUP_LEASES, agent_id)


def _exists(group_id: Any) -> sa.ColumnElement[bool]:
    """Whether the group exists: stored state or committed offsets."""
    g, o = s.groups.c, s.group_offsets.c
    return sa.or_(sa.exists(sa.select(g.group_id).where(g.group_id == group_id)),
                  sa.exists(sa.select(o.group_id).where(o.group_id == group_id)))


def held_existing_groups(db: Database, agent_id: str, after: str | None,
                         limit: int) -> list[str]:
    """A page of the groups whose lease `agent_id` holds and that exist (stored state or
    committed offsets), by id, the first `limit` after `after` (an agent loads them when it
    starts: those of its previous process)."""
    gc = s.group_coordinators.c
    query = (sa.select(gc.group_id).where(gc.agent_id == agent_id, _exists(gc.group_id))
             .order_by(gc.group_id).limit(limit))
    if after is not None:
        query = query.where(gc.group_id > after)
    with db.read() as conn:
        return [r.group_id for r in conn.execute(query)]


def adopt_groups(db: Database, agent_id: str, group_ids: Sequence[str]
                 ) -> list[tuple[GroupLease, GroupRecord | None]]:
    """Take, with a new epoch each, the leases `agent_id` still holds among `group_ids`
    (a previous process of the same agent id held them: it is fenced), with each group as
    stored (None: only offsets), in one transaction; leases another agent holds by now,
    and groups that no longer exist, are left alone."""
    gc, g = s.group_coordinators.c, s.groups.c
    now = db.clock.now_ms()
    with db.write() as conn:
        held = [r.group_id for r in conn.execute(
            sa.select(gc.group_id).where(gc.group_id.in_(sorted(set(group_ids))),
                                         gc.agent_id == agent_id, _exists(gc.group_id))
            .order_by(gc.group_id).with_for_update())]
        if not held:
            return []
        epochs = {r.group_id: int(r.epoch) for r in conn.execute(
            s.group_coordinators.update().where(gc.group_id.in_(held))
            .values(epoch=gc.epoch + 1, acquired_at_ms=now)
            .returning(gc.group_id, gc.epoch))}
        records = {r.group_id: _record(r) for r in conn.execute(
            sa.select(s.groups).where(g.group_id.in_(held)))}
    return [(GroupLease(gid, agent_id, epochs[gid]), records.get(gid)) for gid in held]


def _fence(conn: sa.Connection, lease: GroupLease) -> None:
    """Raise GroupLeaseLostError unless `lease` is still the group's lease (leases.fence)."""
    leases.fence(conn, GROUP_LEASES, lease.group_id, lease.agent_id, lease.epoch)


# ------------------------------------------------------------------ stored groups


def _members_json(members: Sequence[GroupMember]) -> str:
    out = []
    for m in members:
        d = dataclasses.asdict(m)
        for f in _BYTES_FIELDS:
            d[f] = base64.b64encode(d[f]).decode()
        out.append(d)
    return json.dumps(out, separators=(",", ":"))


def _members(text: str) -> tuple[GroupMember, ...]:
    members = []
    for d in json.loads(text):
        for f in _BYTES_FIELDS:
            d[f] = base64.b64decode(d[f])
        members.append(GroupMember(**d))
    return tuple(members)


def _record(row: Any) -> GroupRecord:
    return GroupRecord(group_id=row.group_id, protocol_type=row.protocol_type,
                       protocol_name=row.protocol_name, generation=int(row.generation),
                       leader=row.leader, state=row.state, members=_members(row.members),
                       state_at_ms=int(row.state_at_ms))


def load_group(db: Database, group_id: str) -> GroupRecord | None:
    """The group as last stored, or None if it never was."""
    with db.read() as conn:
        row = conn.execute(sa.select(s.groups).where(s.groups.c.group_id == group_id)).first()
    return None if row is None else _record(row)


def _insert(pg: bool) -> Any:
    """The dialect's INSERT construct (both have ON CONFLICT)."""
    return postgresql.insert if pg else sqlite.insert


@functools.cache
def _upsert_statement(pg: bool, table: sa.Table, keys: tuple[str, ...]) -> Any:
    """INSERT … ON CONFLICT (keys) DO UPDATE of every other column, built once per table
    and dialect (a statement with its values inlined is compiled again on every call)."""
    stmt = _insert(pg)(table)
    return stmt.on_conflict_do_update(
        index_elements=list(keys),
        set_={c.name: stmt.excluded[c.name] for c in table.c if c.name not in keys})


def _upsert(db: Database, conn: sa.Connection, table: sa.Table, keys: tuple[str, ...],
            rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert or update `rows` (one executemany of the cached statement)."""
    conn.execute(_upsert_statement(db.pg, table, keys), list(rows))


def store_group(db: Database, lease: GroupLease, record: GroupRecord) -> None:
    """Store the group as its coordinator (`lease`) has it now. GroupLeaseLostError if the
    lease was taken over (nothing written)."""
    row = {"group_id": record.group_id, "protocol_type": record.protocol_type,
           "protocol_name": record.protocol_name, "generation": record.generation,
           "leader": record.leader, "state": record.state,
           "members": _members_json(record.members), "state_at_ms": record.state_at_ms}
    with db.write() as conn:
        _fence(conn, lease)
        _upsert(db, conn, s.groups, ("group_id",), [row])


def list_groups(db: Database) -> list[GroupRecord]:
    """Every group with stored state or committed offsets, by id (a group that only
    committed offsets, as "simple" consumers do, is Empty with no protocol type)."""
    o = s.group_offsets.c
    with db.read() as conn:
        stored = {r.group_id: _record(r) for r in conn.execute(sa.select(s.groups))}
        for (group_id,) in conn.execute(sa.select(o.group_id).distinct()):
            if group_id not in stored:
                stored[group_id] = GroupRecord(group_id, None, None, 0, None, GROUP_EMPTY,
                                               (), 0)
    return [stored[k] for k in sorted(stored)]


# ------------------------------------------------------------------ offsets


def _end_offsets(conn: sa.Connection, topics: Iterable[str]) -> dict[tuple[str, int], int]:
    """The next offset of every partition of these topics (those that exist)."""
    t, p = s.topics.c, s.partitions.c
    rows = conn.execute(sa.select(t.name, p.partition, p.next_offset)
                        .join(s.partitions, p.topic_id == t.id)
                        .where(t.name.in_(sorted(set(topics)))))
    return {(r.name, int(r.partition)): int(r.next_offset) for r in rows}


def _known_partitions(conn: sa.Connection, topics: Iterable[str]) -> set[tuple[str, int]]:
    return set(_end_offsets(conn, topics))


def commit_offsets(db: Database, group_id: str, offsets: Sequence[OffsetCommit],
                   lease: GroupLease | None = None) -> set[tuple[str, int]]:
    """Commit `offsets` for `group_id` in one transaction: one row written per partition.

    `lease`: the coordinator's, checked (GroupLeaseLostError: nothing written); None for a
    write outside the coordinator (`silt groups reset-offsets` goes through
    `reset_offsets`). Returns the (topic, partition) pairs that do not exist, which are not
    written (Kafka's UNKNOWN_TOPIC_OR_PARTITION for them; the others are committed).
    """
    now = db.clock.now_ms()
    with db.write() as conn:
        if lease is not None:
            _fence(conn, lease)
        known = _known_partitions(conn, (o.topic for o in offsets))
        rows = [{"group_id": group_id, "topic": o.topic, "partition": o.partition,
                 "committed_offset": o.offset, "leader_epoch": o.leader_epoch,
                 "metadata": o.metadata, "committed_at_ms": now}
                for o in offsets if (o.topic, o.partition) in known]
        if rows:
            _upsert(db, conn, s.group_offsets, OFFSET_KEY, rows)
    return {(o.topic, o.partition) for o in offsets} - known


def fetch_offsets(db: Database, group_id: str,
                  topics: Iterable[str] | None = None) -> list[CommittedOffset]:
    """The group's committed offsets (of `topics` only, if given), by topic and partition."""
    o = s.group_offsets.c
    query = sa.select(s.group_offsets).where(o.group_id == group_id)
    if topics is not None:
        query = query.where(o.topic.in_(sorted(set(topics))))
    with db.read() as conn:
        rows = conn.execute(query.order_by(o.topic, o.partition)).all()
    return [CommittedOffset(topic=r.topic, partition=int(r.partition),
                            offset=int(r.committed_offset), leader_epoch=int(r.leader_epoch),
                            metadata=r.metadata, committed_at_ms=int(r.committed_at_ms))
            for r in rows]


def group_lag(db: Database, group_id: str,
              also: Iterable[tuple[str, int]] = ()) -> list[PartitionLag]:
    """The group's position per partition: committed offset, log end offset (the next
    offset) and lag (end - committed, as kafka-consumer-groups counts it), for the
    partitions it has committed offsets of plus `also` (e.g. those assigned to members
    that have not committed yet), by topic and partition. One read transaction; the one
    place lag is computed (`silt groups describe`, metrics)."""
    o = s.group_offsets.c
    with db.read() as conn:
        committed = {(r.topic, int(r.partition)): int(r.committed_offset)
                     for r in conn.execute(sa.select(o.topic, o.partition, o.committed_offset)
                                           .where(o.group_id == group_id))}
        keys = sorted(set(committed) | set(also))
        ends = _end_offsets(conn, (topic for topic, _ in keys))
    out = []
    for key in keys:
        offset, end = committed.get(key), ends.get(key)
        lag = None if offset is None or offset < 0 or end is None else end - offset
        out.append(PartitionLag(key[0], key[1], offset, end, lag))
    return out


def delete_offsets(db: Database, group_id: str, partitions: Iterable[tuple[str, int]],
                   lease: GroupLease | None = None) -> int:
    """Delete the group's committed offsets of these partitions (OffsetDelete); how many
    there were. The coordinator checks first that the group does not consume them."""
    o = s.group_offsets.c
    keys = sorted(set(partitions))
    with db.write() as conn:
        if lease is not None:
            _fence(conn, lease)
        if not keys:
            return 0
        return int(conn.execute(s.group_offsets.delete().where(
            o.group_id == group_id,
            sa.tuple_(o.topic, o.partition).in_(keys))).rowcount)


def _orphaned(db: Database, conn: sa.Connection, record: GroupRecord) -> bool:
    """Whether no live agent coordinates the group and every member's session has
    lapsed since its coordinator was last heard of (its last heartbeat, or the group's
    last store if later)."""
    gc, a = s.group_coordinators.c, s.agents.c
    holder = conn.execute(
        sa.select(gc.agent_id, a.heartbeat_at_ms, a.stopped)
        .join(s.agents, a.agent_id == gc.agent_id, isouter=True)
        .where(gc.group_id == record.group_id)).first()
    now = db.clock.now_ms()
    if holder is not None and holder.heartbeat_at_ms is not None and not holder.stopped \
            and holder.heartbeat_at_ms > now - db.config.broker_session_timeout_ms:
        return False  # coordinated by a live agent: it expires members itself
    seen = max(record.state_at_ms, int(holder.heartbeat_at_ms or 0) if holder else 0)
    session = max((m.session_timeout_ms for m in record.members), default=0)
    return seen + session <= now


def _lock_empty(db: Database, conn: sa.Connection, group_id: str) -> GroupRecord | None:
    """Lock the group's row (creating an Empty one if it has none, so a coordinator taking
    the group out of Empty waits for this transaction) and check it is Empty or Dead."""
    g = s.groups.c
    conn.execute(_insert(db.pg)(s.groups).values(
        group_id=group_id, protocol_type=None, protocol_name=None, generation=0, leader=None,
        state=GROUP_EMPTY, members="[]", state_at_ms=db.clock.now_ms(),
    ).on_conflict_do_nothing(index_elements=["group_id"]))
    row = conn.execute(sa.select(s.groups).where(g.group_id == group_id)
                       .with_for_update()).one()
    record = _record(row)
    if record.state not in (GROUP_EMPTY, GROUP_DEAD) and _orphaned(db, conn, record):
        # Its coordinator is gone and its members' sessions have lapsed since: by Kafka's
        # rules it is empty. Stored so, a coordinator taking it over makes them rejoin
        # (and read the offsets this transaction writes).
        now = db.clock.now_ms()
        conn.execute(s.groups.update().where(g.group_id == group_id).values(
            state=GROUP_EMPTY, members="[]", leader=None, protocol_name=None,
            state_at_ms=now))
        record = dataclasses.replace(record, state=GROUP_EMPTY, members=(), leader=None,
                                     protocol_name=None, state_at_ms=now)
    if record.state not in (GROUP_EMPTY, GROUP_DEAD):
        raise GroupNotEmptyError(
            f"group {group_id!r} is {record.state} with {len(record.members)} member(s):"
            " stop its consumers first")
    return record


def reset_offsets(db: Database, group_id: str, offsets: Sequence[OffsetCommit]) -> None:
    """Set the group's committed offsets from outside the group (`silt groups
    reset-offsets`), only while it is empty (GroupNotEmptyError): the check and the write
    are one transaction that holds the group's row, and a coordinator stores the group
    under that row before its first member joins, so no member can read offsets older
    than the reset once it is committed. UnknownTopicError / UnknownPartitionError if
    a partition does not exist (nothing written)."""
    now = db.clock.now_ms()
    with db.write() as conn:
        _lock_empty(db, conn, group_id)
        known = _known_partitions(conn, (o.topic for o in offsets))
        missing = sorted({(o.topic, o.partition) for o in offsets} - known)
        no_topic = sorted({t for t, _ in missing} - {t for t, _ in known})
        if no_topic:
            raise UnknownTopicError(f"unknown topic {no_topic[0]!r}")
        if missing:
            raise UnknownPartitionError(
                "no such partition: " + ", ".join(f"{t}-{p}" for t, p in missing))
        rows = [{"group_id": group_id, "topic": o.topic, "partition": o.partition,
                 "committed_offset": o.offset, "leader_epoch": o.leader_epoch,
                 "metadata": o.metadata, "committed_at_ms": now} for o in offsets]
        if rows:
            _upsert(db, conn, s.group_offsets, OFFSET_KEY, rows)


def delete_group(db: Database, group_id: str, lease: GroupLease | None = None) -> None:
    """Delete an empty group: its stored state, offsets and lease (DeleteGroups, `silt
    groups delete`). GroupNotEmptyError if it has members, UnknownGroupError if it has
    neither state nor offsets."""
    g, o, gc = s.groups.c, s.group_offsets.c, s.group_coordinators.c
    with db.write() as conn:
        if lease is not None:
            _fence(conn, lease)
        existed = conn.execute(sa.select(g.group_id).where(g.group_id == group_id)).first()
        has_offsets = conn.execute(
            sa.select(o.group_id).where(o.group_id == group_id).limit(1)).first()
        if existed is None and has_offsets is None:
            raise UnknownGroupError(f"group {group_id!r} does not exist")
        _lock_empty(db, conn, group_id)
        conn.execute(s.group_offsets.delete().where(o.group_id == group_id))
        conn.execute(s.groups.delete().where(g.group_id == group_id))
        if lease is None:
            conn.execute(s.group_coordinators.delete().where(gc.group_id == group_id))


def expire_offsets(db: Database) -> int:
    """Delete the committed offsets past offsets.retention.minutes; how many went.

    Kafka's rule: a group's offsets expire together, once the group has been Empty for
    the retention (its `state_at_ms`); a group with no stored state (only "simple"
    commits) loses each offset that long after it was committed. A stored group whose
    coordinator is gone (no live lease holder) counts as empty since the later of its
    last store and its holder's last heartbeat. A stored group with an offset committed
    within the retention is kept whatever its state: offsets reset (or committed by a
    simple consumer) after the group emptied must not go at the next check. An expired
    group's row goes with its offsets. Every agent runs this on a timer; concurrent runs
    delete the same rows.
    """
    now = db.clock.now_ms()
    cutoff = now - db.config.offsets_retention_minutes * 60_000
    g, o, gc, a = s.groups.c, s.group_offsets.c, s.group_coordinators.c, s.agents.c
    holder_seen = (sa.select(sa.func.max(a.heartbeat_at_ms))
                   .join(s.group_coordinators, gc.agent_id == a.agent_id)
                   .where(gc.group_id == g.group_id).scalar_subquery())
    live_holder = sa.exists(sa.select(gc.group_id).where(
        gc.group_id == g.group_id, gc.agent_id.in_(_live_agents(db))))
    recent_commit = sa.exists(sa.select(o.group_id).where(
        o.group_id == g.group_id, o.committed_at_ms > cutoff))
    expired = sa.and_(~recent_commit, g.state_at_ms <= cutoff, sa.or_(
        g.state == GROUP_EMPTY,
        sa.and_(~live_holder, sa.func.coalesce(holder_seen, 0) <= cutoff)))
    with db.write() as conn:
        # The condition is evaluated again on each row as it is deleted (PostgreSQL's
        # READ COMMITTED re-check), so a group a coordinator just stored non-empty stays.
        gone = [r.group_id for r in conn.execute(
            s.groups.delete().where(expired).returning(g.group_id))]
        n = 0
        if gone:
            n += int(conn.execute(s.group_offsets.delete().where(
                o.group_id.in_(gone))).rowcount)
        n += int(conn.execute(s.group_offsets.delete().where(
            o.committed_at_ms <= cutoff,
            ~o.group_id.in_(sa.select(g.group_id)))).rowcount)
    return n


def live_coordinators(db: Database) -> dict[str, str]:
    """Every group whose lease holder is live, with that agent's id (ListGroups: each agent
    lists the groups it coordinates, and the free ones it would be given)."""
    gc = s.group_coordinators.c
    with db.read() as conn:
        rows = conn.execute(sa.select(gc.group_id, gc.agent_id)
                            .where(gc.agent_id.in_(_live_agents(db))))
        return {r.group_id: r.agent_id for r in rows}
