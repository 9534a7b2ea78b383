"""The agent registry: agents serving the Kafka protocol register here, heartbeat, and are
listed to clients as the cluster's brokers while their heartbeat is younger than
broker.session.timeout.ms (the `metadata` section). Which live agent leads which partition
is a pure function of the live set (`agent.placement`).

Each call is one short write or read transaction. A crash of an agent leaves its row: it
stops being listed once its session times out. A clean shutdown deregisters at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from . import schema as s
from .engine import Database
from .errors import UnknownAgentError
from .models import AgentInfo

Endpoints = tuple[tuple[str, str, int], ...]


def agent_info(row: Any) -> AgentInfo:
    """An `agents` row as an AgentInfo (its endpoints decoded)."""
    endpoints: Endpoints = ()
    if row.endpoints:
        endpoints = tuple((str(n), str(h), int(p)) for n, h, p in json.loads(row.endpoints))
    return AgentInfo(node_id=int(row.node_id), agent_id=row.agent_id, host=row.host,
                     port=int(row.port), registered_at_ms=int(row.registered_at_ms),
                     heartbeat_at_ms=int(row.heartbeat_at_ms), endpoints=endpoints)


def register_agent(db: Database, agent_id: str, host: str, port: int,
                   endpoints: Mapping[str, tuple[str, int]] | None = None) -> AgentInfo:
    """Register (or re-register) `agent_id` at host:port, live from now; returns its row.
    `endpoints`: listener name -> advertised (host, port) (None: host:port for every
    listener).

    An agent id keeps its node id (Kafka broker id) across re-registrations, so restarting
    an agent under the same id keeps partition leadership stable. Concurrent first
    registrations of one id: the loser's INSERT fails on the unique agent_id and it
    updates instead.
    """
    if not agent_id:
        raise ValueError("agent_id must not be empty")
    a = s.agents.c
    now = db.clock.now_ms()
    listed: Endpoints = tuple((n, h, p) for n, (h, p) in (endpoints or {}).items())
    values = {"host": host, "port": port, "heartbeat_at_ms": now, "stopped": False,
              "endpoints": json.dumps(listed) if listed else None}
    for _ in range(2):
        with db.write() as conn:
            row = conn.execute(sa.select(s.agents).where(a.agent_id == agent_id)
                               .with_for_update()).first()
            if row is not None:
                conn.execute(s.agents.update().where(a.agent_id == agent_id).values(
                    registered_at_ms=now, **values))
                return AgentInfo(int(row.node_id), agent_id, host, port, now, now, listed)
            try:
                with conn.begin_nested():
                    node_id = conn.execute(s.agents.insert().values(
                        agent_id=agent_id, registered_at_ms=now, **values
                    ).returning(a.node_id)).scalar_one()
            except sa.exc.IntegrityError:
                continue  # registered concurrently: update it on the next pass
            return AgentInfo(int(node_id), agent_id, host, port, now, now, listed)
    raise AssertionError(f"agent {agent_id!r} could be neither inserted nor found")


def heartbeat_agent(db: Database, agent_id: str) -> AgentInfo:
    """Renew the agent's session; UnknownAgentError if it deregistered (register again)."""
    a = s.agents.c
    now = db.clock.now_ms()
    with db.write() as conn:
        row = conn.execute(
            s.agents.update().where(a.agent_id == agent_id, a.stopped == sa.false())
            .values(heartbeat_at_ms=now).returning(*s.agents.c)).first()
    if row is None:
        raise UnknownAgentError(f"agent {agent_id!r} is not registered")
    return agent_info(row)


def deregister_agent(db: Database, agent_id: str) -> None:
    """Stop listing the agent at once (clean shutdown). Idempotent; the row (and so the
    agent id's node id) is kept for a later registration."""
    with db.write() as conn:
        conn.execute(s.agents.update().where(s.agents.c.agent_id == agent_id)
                     .values(stopped=True))


def live_brokers(db: Database) -> list[AgentInfo]:
    """The live agents (not stopped, heartbeat within broker.session.timeout.ms), by node id:
    the brokers a Metadata response lists."""
    a = s.agents.c
    since = db.clock.now_ms() - db.config.broker_session_timeout_ms
    with db.read() as conn:
        rows = conn.execute(sa.select(s.agents).where(
            a.stopped == sa.false(), a.heartbeat_at_ms > since).order_by(a.node_id)).all()
    return [agent_info(r) for r in rows]
