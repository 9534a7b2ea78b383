"""Reads for `silt doctor` (compactor/doctor.py): the file rows and live segments the object
store is checked against, and the current rows of given object keys (a second look at what
the first read and the store listing disagreed on, since both change while they are read)."""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from . import schema as s
from .engine import Database
from .files import file_info
from .models import AuditSnapshot, FileInfo
from .segments import INFO_COLUMNS, segment_info

_IN_BATCH = 500  # keys per IN list
DANGLING_SHOWN = 100  # dangling segment rows reported (one would already be a bug)


def audit_snapshot(db: Database, *, segments: bool = False) -> AuditSnapshot:
    """Every file row but the deleted ones, the files that are not live but hold live
    segments, and with `segments` every live segment (in file order), in one consistent
    snapshot. Reads only: several doctors, agents and compactors may run meanwhile."""
    f, sg, t = s.files, s.segments, s.topics
    with db.read(consistent=True) as conn:
        files = tuple(file_info(r) for r in conn.execute(
            sa.select(f).where(f.c.state != s.FILE_DELETED).order_by(f.c.id)))
        counts = sa.select(sg.c.file_id, sa.func.count().label("n")).where(s.LIVE).group_by(
            sg.c.file_id).subquery()
        stray = tuple((file_info(r), int(r.n)) for r in conn.execute(
            sa.select(f, counts.c.n).join(counts, counts.c.file_id == f.c.id)
            .where(f.c.state != s.FILE_LIVE).order_by(f.c.id)))
        live = () if not segments else tuple(segment_info(r) for r in conn.execute(
            sa.select(*INFO_COLUMNS)
            .select_from(sg.join(f, f.c.id == sg.c.file_id).join(t, t.c.id == sg.c.topic_id))
            .where(s.LIVE).order_by(sg.c.file_id, sg.c.topic_id, sg.c.partition)))
        p = s.partitions
        dangling = tuple((int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in conn.execute(
            sa.select(sg.c.id, sg.c.file_id, sg.c.topic_id, sg.c.partition)
            .select_from(sg.outerjoin(f, f.c.id == sg.c.file_id).outerjoin(p, sa.and_(
                p.c.topic_id == sg.c.topic_id, p.c.partition == sg.c.partition)))
            .where(sa.or_(f.c.id.is_(None), p.c.topic_id.is_(None)))
            .order_by(sg.c.id).limit(DANGLING_SHOWN)))
    return AuditSnapshot(files=files, stray=stray, segments=live, dangling=dangling)


def files_by_key(db: Database, keys: Iterable[str]) -> dict[str, FileInfo]:
    """The current rows (any state, deleted ones too) of these object keys; keys without a
    row are left out."""
    wanted = sorted(set(keys))
    found: dict[str, FileInfo] = {}
    with db.read() as conn:
        for i in range(0, len(wanted), _IN_BATCH):
            for r in conn.execute(sa.select(s.files).where(
                    s.files.c.object_key.in_(wanted[i:i + _IN_BATCH]))):
                found[r.object_key] = file_info(r)
    return found
