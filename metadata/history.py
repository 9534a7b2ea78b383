"""Pruning history rows once past their retention (`metadata` settings `jobs.retention.ms`,
`deleted.files.retention.ms`): finished compaction jobs, and deleted files with their
segments. Without it those tables only grow; with it they stay about the size of the live
data plus what the retentions keep.

Nothing reads these rows: GC never lists a deleted file, reads and snapshots take live
segments only, and a job row is read by its lease holder (a finished job has none; the
holder of a lease expired longer than the retention finds it stale and its commit is
refused). Each batch is one short write transaction, so on SQLite agents' commits wait at
most one batch for the write lock. Crash before a batch's COMMIT: nothing changed (the next
pass prunes those rows); after: they are gone.

Ids are never handed out twice: each table keeps its row with the highest id (SQLite gives
a new row max(id) + 1, so deleting that row would reuse its id; PostgreSQL's sequences never
do), and the file of the highest segment id is kept with it. The snapshot's memory of a
file's segments (reads.py) and jobs' recorded input file ids rely on that.
"""

from __future__ import annotations

import sqlalchemy as sa

from . import schema as s
from .engine import Database
from .files import lock_files
from .models import PruneResult

# Deleted files per transaction (one segment row per partition each: 16,000 segment rows
# at 1,000 partitions per flush), and job rows per transaction.
FILES_PER_BATCH = 16
JOBS_PER_BATCH = 1000
_FINISHED = (s.JOB_COMMITTED, s.JOB_FAILED, s.JOB_ABANDONED)


def prune(db: Database) -> PruneResult:
    """Delete the rows of files deleted at least `deleted.files.retention.ms` ago (and their
    segments' rows), and of compaction jobs finished at least `jobs.retention.ms` ago
    (committed, failed or abandoned, by their last update; or leased with a lease expired
    that long ago, whose files then hold no job id). Batch after batch until none is left;
    returns what went."""
    now = db.clock.now_ms()
    files_before = now - db.config.deleted_files_retention_ms
    jobs_before = now - db.config.jobs_retention_ms
    files = segments = jobs = 0
    while True:
        n, segs = _prune_files(db, files_before)
        files, segments = files + n, segments + segs
        if n < FILES_PER_BATCH:
            break
    while True:
        n = _prune_jobs(db, jobs_before)
        jobs += n
        if n < JOBS_PER_BATCH:
            break
    return PruneResult(files, segments, jobs)


def _prune_files(db: Database, before: int) -> tuple[int, int]:
    """One batch of deleted files' rows and their segments' rows: (files, segments). A read
    finds them first, so a pass with nothing to prune takes no write lock."""
    with db.read() as conn:
        if not _deleted_files(conn, before):
            return 0, 0
    f, sg = s.files.c, s.segments.c
    with db.write() as conn:
        ids = _deleted_files(conn, before)
        if not ids:
            return 0, 0
        segments = conn.execute(s.segments.delete().where(sg.file_id.in_(ids))).rowcount
        files = conn.execute(s.files.delete().where(f.id.in_(ids), _gone(before))).rowcount
    return int(files), int(segments)


def _gone(before: int) -> sa.ColumnElement[bool]:
    f = s.files.c
    return sa.and_(f.state == s.FILE_DELETED, f.state_changed_at_ms <= before)


def _deleted_files(conn: sa.Connection, before: int) -> list[int]:
    """The first batch of files deleted at or before `before`, but the file with the highest
    id and the one holding the highest segment id."""
    f, sg = s.files.c, s.segments.c
    keep = {conn.execute(sa.select(sa.func.max(f.id))).scalar(),
            conn.execute(sa.select(sg.file_id).where(
                sg.id == sa.select(sa.func.max(sg.id)).scalar_subquery())).scalar()}
    return [int(i) for i in conn.execute(
        sa.select(f.id).where(_gone(before), f.id.not_in([k for k in keep if k is not None]))
        .order_by(f.id).limit(FILES_PER_BATCH)).scalars()]


def _prune_jobs(db: Database, before: int) -> int:
    """One batch of finished jobs' rows; files still naming one of them (a job whose lease
    expired) are cleared first, locked in id order (the lock order of jobs.py). A read
    finds them first, so a pass with nothing to prune takes no write lock."""
    with db.read() as conn:
        if not _finished_jobs(conn, before):
            return 0
    j, f = s.jobs.c, s.files.c
    with db.write() as conn:
        ids = _finished_jobs(conn, before)
        if not ids:
            return 0
        held = [int(i) for i in conn.execute(
            sa.select(f.id).where(f.job_id.in_(ids)).order_by(f.id)).scalars()]
        lock_files(conn, held)
        conn.execute(s.files.update().where(f.id.in_(held), f.job_id.in_(ids))
                     .values(job_id=None))
        return int(conn.execute(s.jobs.delete().where(j.id.in_(ids), _done(before))).rowcount)


def _done(before: int) -> sa.ColumnElement[bool]:
    j = s.jobs.c
    return sa.or_(sa.and_(j.state.in_(_FINISHED), j.updated_at_ms <= before),
                  sa.and_(j.state == s.JOB_LEASED, j.lease_expires_ms <= before))


def _finished_jobs(conn: sa.Connection, before: int) -> list[int]:
    """The first batch of jobs finished (or whose lease expired) at or before `before`,
    but the job with the highest id."""
    j = s.jobs.c
    top = conn.execute(sa.select(sa.func.max(j.id))).scalar()
    if top is None:
        return []
    return [int(i) for i in conn.execute(
        sa.select(j.id).where(_done(before), j.id < top).order_by(j.id)
        .limit(JOBS_PER_BATCH)).scalars()]
