"""Compaction jobs: leases (fenced, expiring, taken over), release, and the compaction
commit that swaps a job's input segments for its outputs'.

Lock order, everywhere: the input file rows (FOR UPDATE, in id order), then the job row.
lease_job, commit_compaction and release_job all follow it, so on PostgreSQL a lease
racing a commit of the same job waits for it instead of deadlocking with it; retention
locks files before partition rows like a compaction commit. (SQLite: BEGIN IMMEDIATE
serializes writers; there are no row locks.) Consumer-group state (coordinator leases,
committed offsets) is the next neighbour of these leases: its own module, same helpers.

Failure model of a commit: `Database.commit` (engine.py), read back through the job row
(its id and fence are the commit's stable identity).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from . import schema as s
from . import txnlog
from .engine import Database, Unknown
from .errors import (
    CommitConflictError,
    InvalidCommitError,
    JobConflictError,
    JobLeasedError,
    StaleLeaseError,
    UnknownJobError,
    UnknownPartitionError,
    UnknownTopicError,
)
from .files import held_jobs, layout_columns, lock_files, lock_partitions
from .models import CompactionCommit, CompactionOutput, JobInfo, Lease
from .segments import check_segment, insert_segments, segment_row


def job_info(row: sa.Row[Any]) -> JobInfo:
    """A JobInfo from a `jobs` row."""
    return JobInfo(
        id=int(row.id), spec_id=row.spec_id, state=row.state,
        input_file_ids=tuple(json.loads(row.input_file_ids)), owner=row.owner,
        fence=int(row.fence), lease_expires_ms=int(row.lease_expires_ms),
        attempts=int(row.attempts), created_at_ms=int(row.created_at_ms),
        updated_at_ms=int(row.updated_at_ms),
        result=None if row.result is None else json.loads(row.result),
        input_segments=int(row.input_segments),
    )


def lease_job(db: Database, spec_id: str, input_file_ids: Sequence[int], *, owner: str,
              lease_ms: int) -> Lease:
    """Hold a compaction job's input files until now + `lease_ms` (one transaction).

    - a job with this spec id is leased and unexpired → JobLeasedError;
    - leased but expired → taken over: fence + 1, new owner, attempts + 1 (the old
      holder can no longer commit or renew). `input_file_ids` must be the job's. If an
      input is no longer live the job can never commit: it is marked abandoned, its
      files freed, and JobConflictError raised;
    - otherwise a new job: every input must be live and not held by another unexpired
      job (JobConflictError naming the file), and the number of their live segments is
      recorded for commit_compaction's revalidation.

    Crash before COMMIT: nothing held. After: the job holds its inputs until it is
    committed or released, or its lease expires (then it may be taken over, and other
    jobs may take its files).
    """
    ids = sorted(set(input_file_ids))
    j, f = s.jobs.c, s.files.c
    now = db.clock.now_ms()
    expires = now + lease_ms
    ended: JobConflictError | None = None
    lease: Lease | None = None
    try:
        with db.write() as conn:
            rows = lock_files(conn, ids)
            existing = conn.execute(
                sa.select(s.jobs).where(j.spec_id == spec_id, j.state == s.JOB_LEASED)
                .with_for_update()
            ).first()
            if existing is None:
                problem = (_not_live(rows, ids)
                           or _held_elsewhere(conn, rows, None, now))
                if problem is not None:
                    raise JobConflictError(f"cannot lease {spec_id}: {problem}")
                job_id = int(conn.execute(s.jobs.insert().values(
                    spec_id=spec_id, state=s.JOB_LEASED, input_file_ids=json.dumps(ids),
                    owner=owner, fence=1, input_segments=_live_segments(conn, ids),
                    lease_expires_ms=expires, attempts=1, created_at_ms=now,
                    updated_at_ms=now).returning(j.id)).scalar_one())
                conn.execute(s.files.update().where(f.id.in_(ids)).values(job_id=job_id))
                lease = Lease(job_id, spec_id, 1, owner, tuple(ids), expires)
            elif existing.lease_expires_ms > now:
                raise JobLeasedError(
                    f"job {existing.id} ({spec_id}) is leased by {existing.owner} until"
                    f" {existing.lease_expires_ms}")
            else:
                job_id = int(existing.id)
                stored = sorted(json.loads(existing.input_file_ids))
                if stored != ids:
                    raise JobConflictError(
                        f"job {job_id} ({spec_id}) has inputs {stored}, not {ids}")
                held = _held_elsewhere(conn, rows, job_id, now)
                if held is not None:
                    raise JobConflictError(f"cannot take over {spec_id}: {held}")
                gone = _not_live(rows, ids)
                if gone is None and (_live_segments(conn, ids)
                                     != existing.input_segments):
                    gone = "segments of its input files are no longer live"
                if gone is not None:
                    conn.execute(s.jobs.update().where(j.id == job_id).values(
                        state=s.JOB_ABANDONED, updated_at_ms=now,
                        result=json.dumps({"abandoned": gone})))
                    conn.execute(s.files.update().where(f.job_id == job_id)
                                 .values(job_id=None))
                    ended = JobConflictError(
                        f"job {job_id} ({spec_id}) can never commit ({gone}): abandoned")
                else:
                    fence = int(existing.fence) + 1
                    conn.execute(s.jobs.update().where(j.id == job_id).values(
                        owner=owner, fence=fence, lease_expires_ms=expires,
                        attempts=existing.attempts + 1, updated_at_ms=now))
                    conn.execute(s.files.update().where(f.id.in_(ids))
                                 .values(job_id=job_id))
                    lease = Lease(job_id, spec_id, fence, owner, tuple(ids), expires)
    except sa.exc.IntegrityError as exc:  # jobs_one_leased_per_spec: a racing lessee won
        raise JobLeasedError(f"job {spec_id} was leased concurrently") from exc
    if ended is not None:
        raise ended
    assert lease is not None
    return lease

def _live_segments(conn: sa.Connection, ids: Sequence[int]) -> int:
    """How many live segments these files hold."""
    if not ids:
        return 0
    sg = s.segments.c
    return int(conn.execute(
        sa.select(sa.func.count()).select_from(s.segments)
        .where(sg.file_id.in_(ids), s.LIVE)).scalar_one())

def _held_elsewhere(conn: sa.Connection, rows: Sequence[sa.Row[Any]],
                    own_job: int | None, now: int) -> str | None:
    """Why one of these files is held by another leased, unexpired job, or None."""
    others = [r for r in rows if r.job_id is not None and r.job_id != own_job]
    held = held_jobs(conn, [r.job_id for r in others], now)
    for r in others:
        if r.job_id in held:
            return f"input file {r.id} is held by job {r.job_id}"
    return None

def _check_fence(conn: sa.Connection, lease: Lease) -> Any:
    """Lock the job row; StaleLeaseError unless it is leased with this lease's fence."""
    j = s.jobs.c
    row = conn.execute(
        sa.select(s.jobs).where(j.id == lease.job_id).with_for_update()).first()
    if row is None or row.state != s.JOB_LEASED or row.fence != lease.fence:
        state = None if row is None else f"{row.state}, fence {row.fence}"
        raise StaleLeaseError(
            f"job {lease.job_id} fence {lease.fence} is stale (job is {state})")
    return row

def _job_inputs(conn: sa.Connection, lease: Lease) -> list[int]:
    """The job's inputs plus the lease's, read unlocked (a job's inputs never change)."""
    stored = conn.execute(
        sa.select(s.jobs.c.input_file_ids).where(s.jobs.c.id == lease.job_id)).scalar()
    ids = set(lease.input_file_ids)
    if stored is not None:
        ids.update(json.loads(stored))
    return sorted(ids)

def renew_lease(db: Database, lease: Lease, lease_ms: int,
                outputs: Sequence[int] = ()) -> Lease:
    """Extend the lease to now + `lease_ms`; StaleLeaseError if the fence moved or the job
    is no longer leased. Works on an expired lease nobody took over.

    `outputs`: the job's pending output files, whose age restarts now, so that no GC
    (`files_to_gc` takes pending files older than its grace period as abandoned uploads)
    collects the outputs of a job that is still renewing its lease.

    Crash before COMMIT: the old expiry (and ages) stand; after: the new ones.
    """
    now = db.clock.now_ms()
    with db.write() as conn:
        _check_fence(conn, lease)
        conn.execute(s.jobs.update().where(s.jobs.c.id == lease.job_id).values(
            lease_expires_ms=now + lease_ms, updated_at_ms=now))
        if outputs:
            conn.execute(s.files.update().where(
                s.files.c.id.in_(sorted(set(outputs))), s.files.c.state == s.FILE_PENDING,
            ).values(state_changed_at_ms=now))
    return dataclasses.replace(lease, expires_ms=now + lease_ms)

def release_job(db: Database, lease: Lease, *, state: str = s.JOB_FAILED,
                result: Mapping[str, Any] | None = None) -> None:
    """End a job without committing (`failed` or `abandoned`) and free the inputs it still
    holds. A no-op if the lease is stale or the job is already over.

    Crash before COMMIT: the job stays leased until its lease expires (then its files
    are free for other jobs); after: ended, files free at once.
    """
    if state not in (s.JOB_FAILED, s.JOB_ABANDONED):
        raise ValueError(f"release state must be failed or abandoned, not {state!r}")
    now = db.clock.now_ms()
    with db.write() as conn:
        lock_files(conn, _job_inputs(conn, lease))
        try:
            _check_fence(conn, lease)
        except StaleLeaseError:
            return
        conn.execute(s.jobs.update().where(s.jobs.c.id == lease.job_id).values(
            state=state, updated_at_ms=now,
            result=None if result is None else json.dumps(result, default=str)))
        conn.execute(s.files.update().where(s.files.c.job_id == lease.job_id)
                     .values(job_id=None))

def commit_compaction(db: Database, lease: Lease, *, outputs: Sequence[CompactionOutput],
                      result: Mapping[str, Any] | None = None,
                      checkpoints: Mapping[tuple[str, int], int] | None = None,
                      markers_dropped: Mapping[tuple[str, int], Sequence[int]] | None = None,
                      ) -> CompactionCommit:
    """Replace the job's input segments with the outputs' segments, in ONE transaction.

    Locks the input files, then the job row, and revalidates everything the job read:
    - the job is leased with this fence, else StaleLeaseError (a zombie: its lease was
      taken over, or the job ended). An expired lease nobody took over still commits;
    - every input file is live and all the segments it had when leased are still live,
      else CommitConflictError;
    - no output segment overlaps a live segment that is not an input's (live segments of
      a partition never overlap), else CommitConflictError; every output file is pending
      (not collected meanwhile), else CommitConflictError.
    Malformed outputs raise InvalidCommitError (also before any change), unknown topics
    or partitions UnknownTopicError / UnknownPartitionError. Then: input segments not
    live, outputs pending → live with their segments, inputs live → retired (GC deletes
    them after its grace period, so readers in flight finish), job committed with
    `result`, cleaner `checkpoints` advanced (never backwards), the aborted-transaction
    index rows of the transaction markers the job removed (`markers_dropped`: offsets per
    partition) deleted, files.job_id cleared.

    Crash before COMMIT: nothing changed (outputs stay pending and GC removes them; the
    job stays leased until it expires). After: all of it. Database errors are handled by
    `Database.commit`; a failed COMMIT is read back through the job row: committed with
    this fence → success, else CommitUnknownError (keep the output objects: they may be
    live).
    """
    _validate_outputs(outputs, lease.input_file_ids)
    j = s.jobs.c

    def read_back(conn: sa.Connection) -> CompactionCommit | Unknown:
        row = conn.execute(sa.select(j.state, j.fence).where(j.id == lease.job_id)).first()
        if row is not None and row.state == s.JOB_COMMITTED and row.fence == lease.fence:
            return CompactionCommit(lease.job_id, tuple(sorted(lease.input_file_ids)),
                                    tuple(o.file_id for o in outputs))
        return Unknown("job is " + ("gone" if row is None
                                    else f"{row.state} with fence {row.fence}"))

    return db.commit(
        f"commit of job {lease.job_id}",
        lambda conn: _commit_body(db, conn, lease, outputs, result, checkpoints or {},
                                 markers_dropped or {}),
        read_back, kind="compaction")


def _commit_body(db: Database, conn: sa.Connection, lease: Lease,
                 outputs: Sequence[CompactionOutput], result: Mapping[str, Any] | None,
                 checkpoints: Mapping[tuple[str, int], int],
                 markers_dropped: Mapping[tuple[str, int], Sequence[int]]) -> CompactionCommit:
    f, sg, t, pc = s.files.c, s.segments.c, s.topics.c, s.partitions.c
    now = db.clock.now_ms()
    # 1. Lock the inputs, then the job row (the module's lock order).
    inputs = _job_inputs(conn, lease)
    states = {int(r.id): str(r.state) for r in lock_files(conn, inputs)}
    job = _check_fence(conn, lease)
    # 2. Revalidate the inputs.
    for fid in inputs:
        if states.get(fid) != s.FILE_LIVE:
            raise CommitConflictError(f"input file {fid} is {states.get(fid)}, no longer live")
    stored = sorted(json.loads(job.input_file_ids))
    if _live_segments(conn, stored) != job.input_segments:
        raise CommitConflictError(f"segments of job {lease.job_id}'s inputs are no longer live")
    # 3. Resolve partitions and refuse overlaps with live non-input segments.
    wanted = sorted({(x.topic, x.partition) for o in outputs for x in o.segments}
                    | set(checkpoints) | set(markers_dropped))
    names = sorted({name for name, _ in wanted})
    ids = {r.name: int(r.id) for r in conn.execute(
        sa.select(t.id, t.name).where(t.name.in_(names)))}
    # The partitions written, locked FOR KEY SHARE: not deleted under the outputs.
    next_offset = lock_partitions(db, conn, sorted(
        {(ids[name], part) for name, part in wanted if name in ids}), share=True)
    for name, part in wanted:
        if name not in ids:
            raise UnknownTopicError(f"unknown topic {name!r}")
        if (ids[name], part) not in next_offset:
            raise UnknownPartitionError(f"topic {name!r} has no partition {part}")
    rows = []
    # The first live non-input segment ending at or after an output's base_offset is the
    # only candidate overlap (live segments are ordered and disjoint). One statement for
    # every output segment, with its values bound per execution (building a statement per
    # partition cost more than running it).
    first_after = (sa.select(sg.id, sg.base_offset).where(
        sg.topic_id == sa.bindparam("tid"), sg.partition == sa.bindparam("part"), s.LIVE,
        sg.last_offset >= sa.bindparam("base"), sg.file_id.not_in(inputs))
        .order_by(sg.last_offset).limit(1))
    for o in outputs:
        for x in o.segments:
            tid = ids[x.topic]
            if x.last_offset >= next_offset[(tid, x.partition)]:
                raise InvalidCommitError(
                    f"output {x.topic}/{x.partition} ends at {x.last_offset},"
                    f" past the log end {next_offset[(tid, x.partition)]}")
            nxt = conn.execute(first_after, {"tid": tid, "part": x.partition,
                                             "base": x.base_offset}).first()
            if nxt is not None and nxt.base_offset <= x.last_offset:
                raise CommitConflictError(
                    f"output {x.topic}/{x.partition} [{x.base_offset}, "
                    f"{x.last_offset}] overlaps live segment {nxt.id}")
            rows.append(segment_row(x, o.file_id, tid, x.base_offset, x.last_offset, now,
                                    x.cleaned_at_ms))
    # 4. Swap: inputs' segments out, outputs live with their segments in.
    if inputs:
        conn.execute(s.segments.update().where(sg.file_id.in_(inputs), s.LIVE)
                     .values(live=False))
    for o in outputs:
        flipped = conn.execute(
            s.files.update().where(f.id == o.file_id, f.state == s.FILE_PENDING)
            .values(state=s.FILE_LIVE, state_changed_at_ms=now,
                    **layout_columns(o.layout, f"output file {o.file_id}"))).rowcount
        if flipped != 1:
            raise CommitConflictError(f"output file {o.file_id} is not pending")
    insert_segments(conn, db.pg, rows)
    # 5. Retire the inputs (GC'd after the grace period), free what the job held.
    if inputs:
        conn.execute(s.files.update().where(f.id.in_(inputs)).values(
            state=s.FILE_RETIRED, state_changed_at_ms=now, job_id=None))
    conn.execute(s.files.update().where(f.job_id == lease.job_id).values(job_id=None))
    # 6. Advance cleaner checkpoints (never backwards, never past the log end): one
    # statement, executed for every partition's values.
    if checkpoints:
        offset: sa.BindParameter[int] = sa.bindparam("offset")
        conn.execute(s.partitions.update().where(
            pc.topic_id == sa.bindparam("tid"), pc.partition == sa.bindparam("part"),
            pc.clean_offset < offset,
        ).values(clean_offset=sa.func.least(offset, pc.next_offset)
                 if db.pg else sa.func.min(offset, pc.next_offset)),
            [{"tid": ids[topic], "part": part, "offset": off}
             for (topic, part), off in sorted(checkpoints.items())])
    # 7. The removed markers' aborted transactions leave the index (their records are gone).
    if markers_dropped:
        txnlog.drop_markers(conn, {(ids[topic], part): offs
                                   for (topic, part), offs in markers_dropped.items() if offs})
    conn.execute(s.jobs.update().where(s.jobs.c.id == lease.job_id).values(
        state=s.JOB_COMMITTED, updated_at_ms=now,
        result=None if result is None else json.dumps(result, default=str)))
    return CompactionCommit(lease.job_id, tuple(inputs), tuple(o.file_id for o in outputs))


def _validate_outputs(outputs: Sequence[CompactionOutput], inputs: Sequence[int]) -> None:
    """InvalidCommitError unless the outputs are well formed: distinct pending-file ids that
    are not inputs, each with segments; sane offsets and counts; no two output segments of
    a partition overlapping."""
    seen_files: set[int] = set()
    spans: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for o in outputs:
        if o.file_id in seen_files or o.file_id in inputs:
            raise InvalidCommitError(f"output file {o.file_id} repeated or also an input")
        seen_files.add(o.file_id)
        if not o.segments:
            raise InvalidCommitError(f"output file {o.file_id} has no segments")
        layout_columns(o.layout, f"output file {o.file_id}")
        for x in o.segments:
            where = f"output {x.topic}/{x.partition} [{x.base_offset}, {x.last_offset}]"
            if not 0 <= x.base_offset <= x.last_offset:
                raise InvalidCommitError(f"{where}: need 0 <= base_offset <= last_offset")
            if not 0 <= x.record_count <= x.offset_span:
                raise InvalidCommitError(f"{where}: record_count {x.record_count} out of range")
            check_segment(x, where)
            spans.setdefault((x.topic, x.partition), []).append((x.base_offset, x.last_offset))
    for (topic, part), ranges in spans.items():
        ranges.sort()
        for (_, last), (base, _) in itertools.pairwise(ranges):
            if base <= last:
                raise InvalidCommitError(f"two output segments of {topic}/{part} overlap")


def _not_live(rows: Sequence[sa.Row[Any]], ids: Sequence[int]) -> str | None:
    """Why one of the files `ids` (locked `rows`) is not live, or None."""
    states = {int(r.id): str(r.state) for r in rows}
    for fid in ids:
        if states.get(fid) != s.FILE_LIVE:
            return f"input file {fid} is {states.get(fid, 'unknown')}, not live"
    return None

def get_job(db: Database, job_id: int) -> JobInfo:
    """One job row; UnknownJobError if there is none."""
    with db.read() as conn:
        row = conn.execute(sa.select(s.jobs).where(s.jobs.c.id == job_id)).first()
    if row is None:
        raise UnknownJobError(f"no job with id {job_id}")
    return job_info(row)

def list_jobs(db: Database, state: str | None = None) -> list[JobInfo]:
    """Jobs, oldest first, optionally only those in `state`."""
    q = sa.select(s.jobs).order_by(s.jobs.c.id)
    if state is not None:
        q = q.where(s.jobs.c.state == state)
    with db.read() as conn:
        return [job_info(r) for r in conn.execute(q).all()]


