"""The cluster's identity: the id in the `cluster` row, which the object store's marker
(`objects.keys.MARKER_KEY`, written by cli/cluster.py) also holds, and the store the
metadata was first bound to. A metadata store bound to one object store and opened with another (two
stores sharing one metadata database) is refused before anything is read or written."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from . import schema as s
from .engine import Database


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    """The cluster id and the URL of the store whose marker holds it (None: no marker was
    written yet, e.g. a database from before v6 or one `silt init` has not finished)."""

    cluster_id: str
    store_url: str | None


def cluster_identity(db: Database) -> ClusterIdentity:
    """The cluster's id and bound store."""
    c = s.cluster.c
    with db.read() as conn:
        row = conn.execute(sa.select(c.cluster_id, c.store_url).where(c.id == 1)).one()
    return ClusterIdentity(str(row.cluster_id), row.store_url)


def bind_store(db: Database, store_url: str) -> ClusterIdentity:
    """Record `store_url` as the store holding this cluster's marker, unless one is recorded
    already (the first binding stays); returns the identity as it is then."""
    c = s.cluster.c
    with db.write() as conn:
        conn.execute(s.cluster.update().where(c.id == 1, c.store_url.is_(None))
                     .values(store_url=store_url))
    return cluster_identity(db)
