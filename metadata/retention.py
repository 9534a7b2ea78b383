"""Retention: Kafka's retention.ms / retention.bytes for delete-policy topics, and
DeleteRecords (an explicit log start), which drop a log's prefix the same way."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from . import notify, txnlog
from . import schema as s
from .engine import Database
from .errors import (
    DeletePolicyError,
    MetadataError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from .files import held_jobs, lock_files, lock_live_segments, retire_segments
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
    would otherwise be refused at commit). A read first finds whether anything is due;
    if so, one transaction that locks the candidate files, then the partition rows: the
    lock order of compaction commits, so neither can deadlock the other. Crash before
    COMMIT: nothing changed; after: done.
    """
    now = db.clock.now_ms()
    with db.read() as conn:  # most passes find nothing due: they take no write lock
        if not _retention_prefixes(conn, _rules(conn), now):
            return RetentionResult((), ())
    with db.write() as conn:
        rules = _rules(conn)
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
        starts = {tp: segs[-1].last_offset + 1 for tp, segs in cut.items()}
        dead = [r for segs in cut.values() for r in segs]
        emptied = advance_log_start(db, conn, starts, dead, now)
        changes = [RetentionChange(rules[tid].name, part, starts[(tid, part)], len(segs),
                                   sum(r.record_count for r in segs),
                                   sum(r.data_len for r in segs))
                   for (tid, part), segs in sorted(cut.items())]
    for c in changes:
        log.info("retention: %s/%d log start -> %d (%d segments, %d records, %d bytes)",
                 c.topic, c.partition, c.log_start_offset, c.segments, c.records, c.bytes)
    return RetentionResult(tuple(changes), tuple(emptied))


def retention_due(db: Database) -> tuple[RetentionChange, ...]:
    """What `apply_retention` would remove now, read only (`silt plan` says it: a
    compaction round applies retention first). Segments in files a running job holds are
    counted too; the pass itself leaves those for later."""
    now = db.clock.now_ms()
    with db.read() as conn:
        rules = _rules(conn)
        due = _retention_prefixes(conn, rules, now)
    return tuple(RetentionChange(rules[tid].name, part, segs[-1].last_offset + 1, len(segs),
                                 sum(r.record_count for r in segs),
                                 sum(r.data_len for r in segs))
                 for (tid, part), segs in sorted(due.items()))


def advance_log_start(db: Database, conn: sa.Connection, starts: Mapping[tuple[int, int], int],
                      dead: Sequence[Any], now: int) -> list[int]:
    """Move each (topic_id, partition)'s log start up to `starts` (never down), the cleaner
    checkpoint with it, and retire the `dead` segments wholly below (their files' locks
    held): the one path of retention and DeleteRecords. Waiting fetches are told (below
    the new log start they answer at once). Returns the retired file ids."""
    notify.announce(db, conn)
    pc = s.partitions.c
    for (tid, part), start in sorted(starts.items()):
        conn.execute(s.partitions.update().where(
            pc.topic_id == tid, pc.partition == part, pc.log_start_offset < start,
        ).values(log_start_offset=start))
        conn.execute(s.partitions.update().where(
            pc.topic_id == tid, pc.partition == part, pc.clean_offset < start,
        ).values(clean_offset=start))
    txnlog.drop_below(conn, starts)
    return retire_segments(conn, dead, now)


def _rules(conn: sa.Connection) -> dict[int, TopicInfo]:
    """The topics retention applies to, by id: delete policy, a retention.ms or
    retention.bytes limit."""
    topics = [topic_info(r) for r in conn.execute(sa.select(s.topics).where(s.VISIBLE_TOPIC))]
    return {t.id: t for t in topics if t.config.deletes and (
        t.config.retention_ms >= 0 or t.config.retention_bytes >= 0)}


def _retention_prefixes(conn: sa.Connection, rules: Mapping[int, TopicInfo],
                        now: int) -> dict[tuple[int, int], list[Any]]:
    """Per partition, the prefix of live segments past retention: a segment goes if it and
    every one before it are older than retention.ms, or if the log would still hold at least
    retention.bytes after it (both prefixes: the longer one goes).

    Decided in the database with window functions over the read path's index, so only the
    segments that go are fetched (a round where nothing is due reads no row, whatever the
    number of live segments)."""
    if not rules:
        return {}
    sg = s.segments.c
    ids = sorted(rules)

    def per_topic(value: Callable[[TopicInfo], int]) -> Any:
        return sa.case({tid: value(rules[tid]) for tid in ids}, value=sg.topic_id, else_=-1)

    ms, nbytes = per_topic(lambda t: t.config.retention_ms), per_topic(
        lambda t: t.config.retention_bytes)
    log = (sg.topic_id, sg.partition)
    expired = sa.case((sa.and_(ms >= 0, now - sg.max_timestamp > ms), 1), else_=0)
    # One ordering for both windows (the index's), so the database sorts nothing.
    ranked = sa.select(
        sg.id, sg.file_id, sg.topic_id, sg.partition, sg.base_offset, sg.last_offset,
        sg.record_count, sg.data_len, sg.max_timestamp,
        sa.func.min(expired).over(partition_by=log, order_by=sg.last_offset,
                                  rows=(None, 0)).label("expired"),  # this one and before
        sa.func.coalesce(sa.func.sum(sg.data_len).over(
            partition_by=log, order_by=sg.last_offset, rows=(1, None)), 0
        ).label("left"),  # the bytes after this one
        nbytes.label("keep_bytes"),
    ).where(sg.topic_id.in_(ids), s.LIVE).subquery()
    r = ranked.c
    rows = conn.execute(
        sa.select(r.id, r.file_id, r.topic_id, r.partition, r.base_offset, r.last_offset,
                  r.record_count, r.data_len, r.max_timestamp)
        .where(sa.or_(r.expired == 1, sa.and_(r.keep_bytes >= 0, r.left >= r.keep_bytes)))
        .order_by(r.topic_id, r.partition, r.last_offset)).all()
    return {(int(tid), int(part)): list(group) for (tid, part), group in
            itertools.groupby(rows, key=lambda x: (x.topic_id, x.partition))}


def delete_records(db: Database, offsets: Mapping[tuple[str, int], int]
                   ) -> dict[tuple[str, int], int | MetadataError]:
    """Kafka's DeleteRecords: move each (topic, partition)'s log start up to its offset
    (-1: the high watermark); returns, per partition, the new low watermark or its error.

    An offset above the high watermark (or below -1) is OffsetOutOfRangeError, an unknown
    topic or partition UnknownTopicError / UnknownPartitionError, a topic whose
    cleanup.policy lacks `delete` DeletePolicyError (as Kafka refuses it): that
    partition is left as it is. An offset at or below the log start changes nothing (the
    answer is the log start). Segments wholly below the new start stop being live and
    emptied files retire (`advance_log_start`, retention's path), also in files a
    compaction job holds (the job is then refused at commit and planned again). One
    transaction for all partitions through `Database.commit` (read back: every log start
    moved).
    """
    t, p, sg = s.topics.c, s.partitions.c, s.segments.c
    results: dict[tuple[str, int], int | MetadataError] = {}
    targets: dict[tuple[int, int], int] = {}

    def body(conn: sa.Connection) -> dict[tuple[str, int], int | MetadataError]:
        results.clear()
        targets.clear()
        names = sorted({name for name, _ in offsets})
        topics = {r.name: topic_info(r) for r in conn.execute(
            sa.select(s.topics).where(t.name.in_(names)))}
        ids = {name: info.id for name, info in topics.items()}
        rows = {(int(r.topic_id), int(r.partition)): (int(r.log_start_offset),
                                                      int(r.next_offset))
                for r in conn.execute(sa.select(p.topic_id, p.partition, p.log_start_offset,
                                                p.next_offset)
                                      .where(p.topic_id.in_(sorted(ids.values()))))}
        for (name, part), offset in sorted(offsets.items()):
            if name not in ids:
                results[(name, part)] = UnknownTopicError(f"unknown topic {name!r}")
                continue
            if not topics[name].config.deletes:
                results[(name, part)] = DeletePolicyError(
                    f"records of {name}/{part} cannot be deleted: its cleanup.policy"
                    f" {topics[name].config.cleanup_policy!r} does not include 'delete'")
                continue
            key = (ids[name], part)
            if key not in rows:
                results[(name, part)] = UnknownPartitionError(
                    f"topic {name!r} has no partition {part}")
                continue
            start, end = rows[key]
            target = end if offset == -1 else offset
            if offset < -1 or target > end:
                results[(name, part)] = OffsetOutOfRangeError(
                    f"cannot delete records of {name}/{part} before offset {offset}: the high"
                    f" watermark is {end}")
                continue
            results[(name, part)] = max(start, target)
            if target > start:
                targets[key] = target
        if targets:
            below = lock_live_segments(conn, sa.or_(*(
                sa.and_(sg.topic_id == tid, sg.partition == part, sg.last_offset < target)
                for (tid, part), target in targets.items())))
            advance_log_start(db, conn, targets, below, db.clock.now_ms())
        return dict(results)

    def read_back(conn: sa.Connection) -> dict[tuple[str, int], int | MetadataError] | None:
        for (tid, part), target in targets.items():
            start = conn.execute(sa.select(p.log_start_offset).where(
                p.topic_id == tid, p.partition == part)).scalar()
            if start is None or start < target:
                return None
        return dict(results)

    return db.commit("delete of records", body, read_back, kind="records")
