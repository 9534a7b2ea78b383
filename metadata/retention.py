"""Retention: Kafka's retention.ms / retention.bytes for delete-policy topics."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from . import notify
from . import schema as s
from .engine import Database
from .files import held_jobs, lock_files
from .models import RetentionChange, RetentionResult, TopicInfo
from .topics import topic_info

log = logging.getLogger(__name__)


def apply_retention(db: Database) -> RetentionResult:
    """Kafka's time and size retention for topics whose cleanup.policy has `delete`.

    Per partition, the oldest live segments go while the newest record of each is older
    than `retention.ms` (now - max_timestamp > retention.ms), then while the log would
    still hold at least `retention.bytes` without the next one (-1 disables either).
    Only a prefix goes: the first segment that breaches neither stops it. The log start
    moves past the last segment removed (reads below it fail with OffsetOutOfRangeError)
    and the cleaner checkpoint with it; files left without a live segment are retired,
    so GC deletes their objects after the grace period (readers in flight finish).

    Segments in files held by a running compaction job wait for the next pass (the job
    would otherwise be refused at commit). One transaction that locks the candidate
    files, then the partition rows: the lock order of compaction commits, so neither
    can deadlock the other. Crash before COMMIT: nothing changed; after: done.
    """
    f = s.files.c
    now = db.clock.now_ms()
    with db.write() as conn:
        topics = [topic_info(r) for r in conn.execute(sa.select(s.topics))]
        rules = {ti.id: ti for ti in topics if ti.config.deletes and (
            ti.config.retention_ms >= 0 or ti.config.retention_bytes >= 0)}
        if not rules:
            return RetentionResult((), ())
        due = _retention_prefixes(conn, rules, now)
        if not due:
            return RetentionResult((), ())
        wanted = sorted({r.file_id for segs in due.values() for r in segs})
        locked = lock_files(conn, wanted)
        held = held_jobs(conn, [r.job_id for r in locked if r.job_id is not None], now)
        usable = {int(r.id) for r in locked if r.state == s.FILE_LIVE and r.job_id not in held}
        if db.pg:  # a compaction may have swapped segments before the locks were taken
            due = _retention_prefixes(conn, rules, now)  # (SQLite: BEGIN IMMEDIATE)
        # Each prefix stops at the first segment of a file not locked here or held by a job.
        cut = {}
        for tp, segs in due.items():
            n = next((i for i, r in enumerate(segs) if r.file_id not in usable), len(segs))
            if n:
                cut[tp] = segs[:n]
        if not cut:
            return RetentionResult((), ())
        sg, pc = s.segments.c, s.partitions.c
        dead = sorted(r.id for segs in cut.values() for r in segs)
        for i in range(0, len(dead), 500):
            conn.execute(s.segments.update().where(sg.id.in_(dead[i:i + 500]))
                         .values(live=False))
        changes = []
        for (tid, part), segs in sorted(cut.items()):
            start = segs[-1].last_offset + 1
            conn.execute(s.partitions.update().where(
                pc.topic_id == tid, pc.partition == part, pc.log_start_offset < start,
            ).values(log_start_offset=start))
            conn.execute(s.partitions.update().where(
                pc.topic_id == tid, pc.partition == part, pc.clean_offset < start,
            ).values(clean_offset=start))
            changes.append(RetentionChange(
                rules[tid].name, part, start, len(segs),
                sum(r.record_count for r in segs), sum(r.data_len for r in segs)))
        touched = sorted({r.file_id for segs in cut.values() for r in segs})
        still = {int(x) for x in conn.execute(
            sa.select(sg.file_id).where(sg.file_id.in_(touched), s.LIVE).distinct()
        ).scalars()}
        emptied = [fid for fid in touched if fid not in still]
        if emptied:
            conn.execute(s.files.update().where(f.id.in_(emptied), f.state == s.FILE_LIVE)
                         .values(state=s.FILE_RETIRED, state_changed_at_ms=now, job_id=None))
        notify.announce(db, conn)  # waiting fetches below the new log start answer now
    for c in changes:
        log.info("retention: %s/%d log start -> %d (%d segments, %d records, %d bytes)",
                 c.topic, c.partition, c.log_start_offset, c.segments, c.records, c.bytes)
    return RetentionResult(tuple(changes), tuple(emptied))


def _retention_prefixes(conn: sa.Connection, rules: Mapping[int, TopicInfo],
                        now: int) -> dict[tuple[int, int], list[Any]]:
    """Per partition, the prefix of live segments past retention."""
    sg = s.segments.c
    rows = conn.execute(
        sa.select(sg.id, sg.file_id, sg.topic_id, sg.partition, sg.base_offset,
                  sg.last_offset, sg.record_count, sg.data_len, sg.max_timestamp)
        .where(sg.topic_id.in_(sorted(rules)), s.LIVE)
        .order_by(sg.topic_id, sg.partition, sg.last_offset)).all()
    out: dict[tuple[int, int], list[Any]] = {}
    for (tid, part), group in itertools.groupby(rows, key=lambda r: (r.topic_id, r.partition)):
        segs = list(group)
        cfg = rules[tid].config
        n = 0
        if cfg.retention_ms >= 0:
            while n < len(segs) and now - segs[n].max_timestamp > cfg.retention_ms:
                n += 1
        if cfg.retention_bytes >= 0:
            left = sum(r.data_len for r in segs[n:])
            while n < len(segs) and left - segs[n].data_len >= cfg.retention_bytes:
                left -= segs[n].data_len
                n += 1
        if n:
            out[(int(tid), int(part))] = segs[:n]
    return out
