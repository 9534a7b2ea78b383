"""The `dynamic_configs` rows: the configs AlterConfigs and IncrementalAlterConfigs set on a
resource that is not a topic, per Kafka ConfigResource (type id, name), as Kafka's
ConfigurationControlManager keeps them. What may be stored is each type's module's concern
(brokerconfig.py, groupconfig.py); this one reads the rows and replaces a resource's set.

A change is one write transaction that computes the resource's new set from the rows read
in it and replaces the old one (concurrent changes serialize on the cluster row): a crash
before COMMIT changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import sqlalchemy as sa

from . import schema as s
from .engine import Database, Unknown

Stored = dict[str, dict[str, str]]
"""Resource name -> its configs (a resource with none is absent)."""


def stored(conn: sa.Connection, resource_type: int, names: Sequence[str]) -> Stored:
    """The configs of these resources of `resource_type`, read in `conn`."""
    d = s.dynamic_configs.c
    out: Stored = {}
    rows = conn.execute(sa.select(d.resource_name, d.config_key, d.value).where(
        d.resource_type == resource_type, d.resource_name.in_(names)))
    for row in rows:
        out.setdefault(row.resource_name, {})[row.config_key] = row.value
    return out


def read(db: Database, resource_type: int, names: Sequence[str]) -> Stored:
    """`stored` in a read transaction of its own."""
    with db.read() as conn:
        return stored(conn, resource_type, names)


def replace(db: Database, resource_type: int, name: str,
            compute: Callable[[sa.Connection], dict[str, str]], *,
            validate_only: bool = False) -> dict[str, str]:
    """Replace resource (`resource_type`, `name`)'s configs with what `compute` returns
    (called in the write transaction, after the cluster row's lock; it raises to refuse,
    committing nothing); `validate_only` stores nothing. Returns the new set."""
    d = s.dynamic_configs.c
    after: list[dict[str, str]] = []

    def body(conn: sa.Connection) -> dict[str, str]:
        after.clear()
        conn.execute(sa.select(s.cluster.c.id).where(s.cluster.c.id == 1).with_for_update())
        configs = compute(conn)
        after.append(configs)
        if not validate_only:
            conn.execute(s.dynamic_configs.delete().where(
                d.resource_type == resource_type, d.resource_name == name))
            if configs:
                conn.execute(s.dynamic_configs.insert(), [
                    {"resource_type": resource_type, "resource_name": name,
                     "config_key": k, "value": v} for k, v in configs.items()])
        return configs

    def read_back(conn: sa.Connection) -> dict[str, str] | Unknown | None:
        if not after:
            return Unknown(f"configs of resource {resource_type}/{name!r}: none computed")
        now = stored(conn, resource_type, (name,)).get(name, {})
        return after[0] if now == after[0] else None

    return db.commit(f"configs of resource {resource_type}/{name!r}", body, read_back,
                     kind="configs")
