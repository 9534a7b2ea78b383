"""ACL bindings (Kafka's CreateAcls, DescribeAcls, DeleteAcls; `silt acls`): stored rows
and the version agents cache them by.

Each change is one write transaction that first takes `acl_version` (+1: its row lock on
PostgreSQL, the write lock on SQLite, so ACL writers serialize and a binding is never
stored twice) and announces itself on ACL_CHANNEL (PostgreSQL: a NOTIFY delivered at
COMMIT; SQLite watchers see every commit). A crash before COMMIT changes nothing; after
it the change is whole and every agent's watcher hears it (notify.py). Agents decide from
a snapshot built from `list_acls` (agent/protocol/authz.py), read again only when
`acl_version` moved: no decision reads the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from acl import Acl, AclFilter, Operation, PatternType, Permission, ResourceType, check_new
from acl import from_code as code

from . import schema as s
from .engine import Database
from .notify import announce_acls


def _acl(row: Any) -> Acl:
    return Acl(code(ResourceType, row.resource_type), row.resource_name,
               code(PatternType, row.pattern_type), row.principal, row.host,
               code(Operation, row.operation), code(Permission, row.permission))


def _values(acl: Acl) -> dict[str, object]:
    return {"resource_type": int(acl.resource_type), "resource_name": acl.name,
            "pattern_type": int(acl.pattern_type), "principal": acl.principal,
            "host": acl.host, "operation": int(acl.operation),
            "permission": int(acl.permission)}


def _rows(conn: sa.Connection) -> list[Any]:
    return list(conn.execute(sa.select(s.acls).order_by(s.acls.c.id)).all())


def create_acls(db: Database, acls: Sequence[Acl]) -> None:
    """Store the bindings (each checked by `acl.check_new`, InvalidAclError before anything
    is written); one already stored is kept once, as Kafka's AclControlManager does."""
    for binding in acls:
        check_new(binding)
    now = db.clock.now_ms()
    with db.write() as conn:
        s.take_next(conn, s.acl_version)
        stored = {_acl(row) for row in _rows(conn)}
        for binding in dict.fromkeys(acls):
            if binding not in stored:
                conn.execute(s.acls.insert().values(created_at_ms=now, **_values(binding)))
        announce_acls(db, conn)


def delete_acls(db: Database, filters: Sequence[AclFilter]) -> list[list[Acl]]:
    """Delete every binding one of `filters` matches, in one transaction; per filter, the
    bindings it matched (a binding two filters match is listed under both, as Kafka)."""
    with db.write() as conn:
        s.take_next(conn, s.acl_version)
        rows = _rows(conn)
        matched: list[list[Acl]] = []
        doomed: set[int] = set()
        for flt in filters:
            hits = [(int(row.id), _acl(row)) for row in rows if flt.matches(_acl(row))]
            doomed.update(i for i, _ in hits)
            matched.append([binding for _, binding in hits])
        if doomed:
            conn.execute(s.acls.delete().where(s.acls.c.id.in_(sorted(doomed))))
        announce_acls(db, conn)
    return matched


def list_acls(db: Database) -> tuple[int, list[Acl]]:
    """(version, every binding) read together: the snapshot an agent decides from."""
    with db.read(consistent=True) as conn:
        version = conn.execute(sa.select(s.acl_version.c.next_id)).scalar_one()
        return int(version), [_acl(row) for row in _rows(conn)]


def acl_version(db: Database) -> int:
    """The change counter: the bindings are the same as long as it is."""
    with db.read() as conn:
        return int(conn.execute(sa.select(s.acl_version.c.next_id)).scalar_one())
