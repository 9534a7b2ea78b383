"""Coordinator leases: which agent coordinates a key (a consumer group, a transactional id),
the one definition both coordinators use (groups.py, transactions.py).

A lease row names an agent and an epoch. It is valid while that agent is live in the agent
registry (agents.py), so an agent's one registry heartbeat renews every lease it holds, and
a crashed agent's leases can be taken over once its session times out (a cleanly stopped
agent's at once). A takeover bumps the epoch; every write a coordinator makes checks its
epoch under the lease row's lock in the same transaction (`fence`), so a paused former
coordinator writes nothing after a takeover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from . import schema as s
from .agents import agent_info
from .engine import Database
from .errors import MetadataError
from .models import AgentInfo


@dataclass(frozen=True, slots=True)
class LeaseKind:
    """One kind of lease: its table, the key column, what it leases (for messages), and
    the errors it raises: `elsewhere(message, holder)` when another live agent holds it,
    `lost(message)` when a write finds its epoch moved."""

    table: sa.Table
    key: str
    what: str
    elsewhere: type[MetadataError]
    lost: type[MetadataError]

    @property
    def column(self) -> sa.ColumnElement[Any]:
        return self.table.c[self.key]


def live_agents(db: Database) -> sa.Select[Any]:
    """The agent ids of live agents (as agents.live_brokers decides)."""
    a = s.agents.c
    since = db.clock.now_ms() - db.config.broker_session_timeout_ms
    return sa.select(a.agent_id).where(a.stopped == sa.false(), a.heartbeat_at_ms > since)


def holder(db: Database, kind: LeaseKind, key: str) -> AgentInfo | None:
    """The live agent holding `key`'s lease, or None (nobody, or its holder is not live)."""
    a, t = s.agents.c, kind.table.c
    with db.read() as conn:
        row = conn.execute(
            sa.select(s.agents).join(kind.table, t.agent_id == a.agent_id)
            .where(kind.column == key, a.agent_id.in_(live_agents(db)))).first()
    return None if row is None else agent_info(row)


def acquire(db: Database, kind: LeaseKind, key: str, agent_id: str) -> int:
    """Make `agent_id` the holder of `key`'s lease with a new epoch (fencing any earlier
    holder, this agent's own earlier incarnations included); returns the epoch.

    `kind.elsewhere` if another agent holds it and is live. Concurrent acquirers of a free
    key: one inserts; the other's insert fails on the primary key and it looks again
    (finding the winner live).
    """
    for _ in range(2):
        now = db.clock.now_ms()
        with db.write() as conn:
            row = conn.execute(sa.select(kind.table).where(kind.column == key)
                               .with_for_update()).first()
            if row is None:
                try:
                    with conn.begin_nested():
                        conn.execute(kind.table.insert().values(
                            {kind.key: key, "agent_id": agent_id, "epoch": 1,
                             "acquired_at_ms": now}))
                except sa.exc.IntegrityError:
                    continue
                return 1
            if row.agent_id != agent_id and conn.execute(
                    live_agents(db).where(s.agents.c.agent_id == row.agent_id)).first():
                raise kind.elsewhere(
                    f"{kind.what} {key!r} is coordinated by agent {row.agent_id}", row.agent_id)
            epoch = int(row.epoch) + 1
            conn.execute(kind.table.update().where(kind.column == key)
                         .values(agent_id=agent_id, epoch=epoch, acquired_at_ms=now))
            return epoch
    raise AssertionError(f"{kind.what} {key!r}: its lease could be neither inserted nor found")


def held(db: Database, kind: LeaseKind, agent_id: str) -> dict[str, int]:
    """The keys whose lease `agent_id` holds, with their epochs."""
    t = kind.table.c
    with db.read() as conn:
        rows = conn.execute(sa.select(kind.column, t.epoch).where(t.agent_id == agent_id))
        return {r[0]: int(r[1]) for r in rows}


def fence(conn: sa.Connection, kind: LeaseKind, key: str, agent_id: str, epoch: int) -> None:
    """Raise `kind.lost` unless (`agent_id`, `epoch`) is still `key`'s lease; the row stays
    locked (shared) to the end of the transaction, so a takeover waits for this write."""
    t = kind.table.c
    row = conn.execute(sa.select(t.agent_id, t.epoch).where(kind.column == key)
                       .with_for_update(read=True)).first()
    if row is None or row.agent_id != agent_id or int(row.epoch) != epoch:
        now = "nobody" if row is None else f"agent {row.agent_id} (epoch {row.epoch})"
        raise kind.lost(f"{kind.what} {key!r}: lease epoch {epoch} of agent {agent_id}"
                        f" was taken over; now {now}")


def live_holders(db: Database, kind: LeaseKind) -> dict[str, str]:
    """Every key whose lease holder is live, with that agent's id (list requests: each
    agent lists what it coordinates, and the free keys placement gives it)."""
    t = kind.table.c
    with db.read() as conn:
        rows = conn.execute(sa.select(kind.column, t.agent_id)
                            .where(t.agent_id.in_(live_agents(db))))
        return {r[0]: r[1] for r in rows}
