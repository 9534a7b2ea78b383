"""Reads: a partition's live segments from an offset, the planner's snapshot, stats."""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from . import schema as s
from . import txnlog
from .engine import Database
from .errors import OffsetOutOfRangeError, UnknownPartitionError, UnknownTopicError
from .files import file_info, held_jobs
from .models import LevelStats, PartitionFrom, PartitionInfo, SegmentInfo, Snapshot, StoreStats
from .segments import SNAPSHOT_COLUMNS, live_segment_info, segment_info, segment_infos
from .topics import partition_info, topic_info


def find_segments(
    db: Database, topic: str, partition: int, from_offset: int, *, limit: int | None = None
) -> list[SegmentInfo]:
    """Live segments of a partition with last_offset >= from_offset, in offset order.

    One statement: the partition row (for the log start check) LEFT JOINed on true to a
    derived table of its live segments — a range scan of the index (topic_id, partition,
    last_offset) WHERE live with its own ORDER BY … LIMIT, so a read stops after `limit`
    index entries instead of sorting every later segment (both planners would otherwise
    sort them all). OffsetOutOfRangeError if from_offset is below the log start; an
    offset at or past next_offset gives [].
    """
    params = {"topic": topic, "partition": partition, "from_offset": from_offset}
    if limit is not None:
        params["limit"] = max(limit, 1)
    with db.read() as conn:
        rows = conn.execute(_find_segments_query(limit is not None), params).all()
        if not rows:
            _raise_unknown(conn, topic, partition)
    log_start = rows[0].log_start_offset
    if from_offset < log_start:
        raise OffsetOutOfRangeError(
            f"offset {from_offset} of {topic}/{partition} is below log start {log_start}"
        )
    return [segment_info(r) for r in rows if r.id is not None]


@functools.cache
def _find_segments_query(limited: bool) -> sa.Select[Any]:
    """`find_segments`' statement with bind parameters topic, partition, from_offset (and
    limit), built once: building it costs more than running it (a fetch runs one per
    partition)."""
    t, p, sg, f = s.topics, s.partitions, s.segments, s.files
    topic = sa.bindparam("topic", type_=t.c.name.type)
    partition = sa.bindparam("partition", type_=p.c.partition.type)
    topic_id = sa.select(t.c.id).where(t.c.name == topic).scalar_subquery()
    inner = (
        sa.select(*sg.c, f.c.object_key, f.c.size.label("file_size"))
        .select_from(sg.join(f, f.c.id == sg.c.file_id))
        .where(
            sg.c.topic_id == topic_id,
            sg.c.partition == partition,
            s.LIVE,
            sg.c.last_offset >= sa.bindparam("from_offset", type_=sg.c.last_offset.type),
        )
        .order_by(sg.c.last_offset)
    )
    if limited:
        inner = inner.limit(sa.bindparam("limit", type_=sa.Integer()))
    seg = inner.subquery("seg")
    return (
        sa.select(p.c.log_start_offset, t.c.name.label("topic"), *seg.c)
        .select_from(t.join(p, p.c.topic_id == t.c.id).outerjoin(seg, sa.true()))
        .where(t.c.name == topic, p.c.partition == partition)
        .order_by(seg.c.last_offset)
    )


def partitions_from(
    db: Database, wanted: Sequence[tuple[str, int, int]], *, limit: int
) -> dict[tuple[str, int], PartitionFrom]:
    """Many (topic, partition, from_offset), of any topics, in ONE statement (a Fetch of N
    partitions costs one round trip, not N nor one per topic): each partition's offsets
    (log start, high watermark, last stable offset) and its first `limit` live segments
    from its offset, or its OffsetOutOfRangeError (below its log start), and whether an
    aborted transaction ends at or after that offset (else a read_committed fetch has
    none to send and need not look them up). A partition
    caught up (from_offset at its high watermark) costs one index probe that finds nothing.
    A partition that does not exist (its topic neither) is left out.

    The statement joins the wanted partitions (a VALUES list: `_Wanted`) to their rows,
    each LEFT JOINed to the same bounded range scan of the live index as `find_segments`
    (`_from_query`), run outside a transaction (`Database.single`: one statement sees one
    snapshot, and costs no BEGIN and COMMIT round trips). It costs in proportion to the
    partitions (100 reading 8 segments each: ~6 ms of SQLite, ~19 ms on PostgreSQL with the
    rows made); a UNION ALL of one arm per partition, as before, cost more than that (SQLite
    ran 100 arms in 22 ms, 10 in 0.7; PostgreSQL planned 100 in ~100 ms)."""
    out: dict[tuple[str, int], PartitionFrom] = {}
    if not wanted:
        return out
    # A partition named twice: its last offset, as the fetch keeps it.
    froms = {(topic, partition): offset for topic, partition, offset in wanted}
    items = sorted(froms.items())
    rows: list[Any] = []
    with db.single() as conn:
        query = _wanted_query(conn.dialect)
        for start in range(0, len(items), _PER_STATEMENT):
            sql, params = query.statement(max(limit, 1), items[start:start + _PER_STATEMENT])
            rows += conn.exec_driver_sql(sql, params).all()
    by_partition: dict[tuple[str, int], list[Any]] = {}
    for r in rows:
        by_partition.setdefault((r[_TOPIC], int(r[_PARTITION])), []).append(r)
    for key, found in by_partition.items():
        r = found[0]
        info = PartitionInfo(key[0], key[1], int(r[_LOG_START]), int(r[_NEXT]),
                             int(r[_CLEAN]), None if r[_UNSTABLE] is None else int(r[_UNSTABLE]))
        from_offset = froms[key]
        segments: list[SegmentInfo] | OffsetOutOfRangeError
        if from_offset < info.log_start_offset:
            segments = OffsetOutOfRangeError(
                f"offset {from_offset} of {key[0]}/{key[1]} is below log start"
                f" {info.log_start_offset}")
        else:
            segments = sorted(segment_infos([x for x in found if x[_SEGMENT_ID] is not None]),
                              key=_LAST_OFFSET)
        out[key] = PartitionFrom(int(r[_TOPIC_ROW]), info, segments, bool(r[_ABORTED]))
    return out


def partition_offsets(db: Database, topics: Collection[str], partitions: Collection[int]
                      ) -> dict[tuple[str, int], tuple[int, PartitionInfo]]:
    """The offsets (log start, high watermark, last stable offset) and topic row id of each
    existing partition numbered in `partitions` of a topic in `topics`, in ONE statement
    outside a transaction: the long-polls a commit notification wakes together share it
    (agent/protocol/apis/fetch.py), so it reads only partition rows, no segments (a tenth of
    what a `partitions_from` arm costs on SQLite)."""
    t, p = s.topics.c, s.partitions.c
    query = (sa.select(t.id, t.name, p.partition, p.log_start_offset, p.next_offset,
                       p.clean_offset, txnlog.FIRST_UNSTABLE)
             .select_from(s.topics.join(s.partitions, p.topic_id == t.id))
             .where(t.name.in_(sorted(topics)), p.partition.in_(sorted(partitions))))
    with db.single() as conn:
        rows = conn.execute(query).all()
    return {(r.name, int(r.partition)): (int(r.id), partition_info(r.name, r, r.first_unstable))
            for r in rows}


@dataclass(frozen=True)
class _Wanted:
    """`partitions_from`'s statement, compiled once per dialect with the wanted partitions
    left out: a call adds them as a VALUES list (the CTE `w`) of one row per partition,
    parameters renamed or ordered as the driver's style needs (building and compiling a
    statement through SQLAlchemy for each number of partitions costs more than running it)."""

    sql: str  # the SELECT over `w`
    names: tuple[str, ...] | None  # a positional driver's parameter order, by name
    defaults: dict[str, Any]

    def statement(self, limit: int, items: Sequence[tuple[tuple[str, int], int]]
                  ) -> tuple[str, Any]:
        """The SQL text and parameters for `items` ((topic, partition), from_offset)."""
        values = {**self.defaults, "limit": limit, "last": limit - 1}
        if self.names is not None:  # qmark (SQLite): the rows' parameters, then the body's
            row = f"({_ROW.format('?', '?', '?')})"
            params = [x for (topic, partition), from_offset in items
                      for x in (topic, partition, from_offset)]
            params += [values[name] for name in self.names]
            return _with(", ".join([row] * len(items))) + self.sql, tuple(params)
        rows = []  # named (psycopg's pyformat): row i's own w_topic_i, w_partition_i, w_from_i
        for i, ((topic, partition), from_offset) in enumerate(items):
            values[f"w_topic_{i}"], values[f"w_partition_{i}"] = topic, partition
            values[f"w_from_{i}"] = from_offset
            rows.append(f"({_ROW.format(*(f'%(w_{n}_{i})s' for n in _W_COLUMNS))})")
        return _with(", ".join(rows)) + self.sql, values


_W_COLUMNS = ("topic", "partition", "from")
# A row of `w`, typed (PostgreSQL gives an untyped parameter no type of its own).
_ROW = "CAST({} AS VARCHAR), CAST({} AS INTEGER), CAST({} AS BIGINT)"
_WANTED = sa.table("w", *(sa.column(f"w_{n}") for n in _W_COLUMNS))
_PER_STATEMENT = 500  # partitions per statement: its parameters stay a few thousand


def _with(rows: str) -> str:
    return f"WITH w ({', '.join(f'w_{n}' for n in _W_COLUMNS)}) AS (VALUES {rows})\n"


@functools.lru_cache(maxsize=16)
def _wanted_query(dialect: sa.Dialect) -> _Wanted:
    compiled = _from_query(lateral=dialect.name != "sqlite").compile(dialect=dialect)
    # Values of the parameters SQLAlchemy adds itself (LIMIT 1, the offset bound's default).
    defaults = dict(compiled.construct_params({"last": 0, "limit": 1}))
    if compiled.positional:
        return _Wanted(str(compiled), tuple(compiled.positiontup or ()), defaults)
    return _Wanted(str(compiled), None, defaults)


_LAST_OFFSET = operator.attrgetter("last_offset")
_NO_BOUND = 2**63 - 1  # fewer than `limit` segments from the offset: all of them


def _from_query(lateral: bool) -> sa.Select[Any]:
    """`partitions_from`'s statement over the wanted partitions `w` as SQLAlchemy builds it
    (parameters `limit` and `last`, the limit less one): `_Wanted` compiles it once. Each
    partition's first segments from its offset are a bounded range scan of the live index:
    with `lateral` (PostgreSQL) a LATERAL subquery with the limit, else (SQLite has no
    LATERAL) a join on the offsets up to the limit-th segment's last one, found by one
    more index probe (a partition's live segments never overlap: last offsets differ)."""
    t, p, sg, f, a = s.topics, s.partitions, s.segments, s.files, s.aborted_txns
    w = _WANTED.c
    # A primary-key probe: is any aborted transaction's marker at or after the offset?
    aborted = sa.exists().where(a.c.topic_id == t.c.id, a.c.partition == p.c.partition,
                                a.c.last_offset >= w.w_from).label("aborted_after")
    wanted = (_WANTED.join(t, t.c.name == w.w_topic)
              .join(p, sa.and_(p.c.topic_id == t.c.id, p.c.partition == w.w_partition)))
    head = (t.c.id.label("topic_row"), t.c.name.label("topic"),
            p.c.partition.label("partition_index"), p.c.log_start_offset, p.c.next_offset,
            p.c.clean_offset, txnlog.FIRST_UNSTABLE, aborted)
    if lateral:
        seg = (sa.select(*sg.c, f.c.object_key, f.c.size.label("file_size"))
               .select_from(sg.join(f, f.c.id == sg.c.file_id))
               .where(sg.c.topic_id == t.c.id, sg.c.partition == p.c.partition, s.LIVE,
                      sg.c.last_offset >= w.w_from)
               .order_by(sg.c.last_offset).limit(sa.bindparam("limit", type_=sa.Integer()))
               .lateral("seg"))
        return sa.select(*head, *seg.c).select_from(wanted.outerjoin(seg, sa.true()))
    s2 = sg.alias("s2")
    bound = (sa.select(s2.c.last_offset)
             .where(s2.c.topic_id == t.c.id, s2.c.partition == p.c.partition,
                    s2.c.live == sa.true(), s2.c.last_offset >= w.w_from)
             .order_by(s2.c.last_offset)
             .limit(1).offset(sa.bindparam("last", type_=sa.Integer()))
             .scalar_subquery())
    in_range = sa.and_(sg.c.topic_id == t.c.id, sg.c.partition == p.c.partition, s.LIVE,
                       sg.c.last_offset >= w.w_from,
                       sg.c.last_offset <= sa.func.coalesce(bound, _NO_BOUND))
    return (sa.select(*head, *sg.c, f.c.object_key, f.c.size.label("file_size"))
            .select_from(wanted.outerjoin(sg, in_range).outerjoin(f, f.c.id == sg.c.file_id)))


# Where a `partitions_from` row holds its partition's fields; the segment's id follows.
(_TOPIC_ROW, _TOPIC, _PARTITION, _LOG_START, _NEXT, _CLEAN, _UNSTABLE, _ABORTED,
 _SEGMENT_ID) = range(9)


def _raise_unknown(conn: sa.Connection, topic: str, partition: int) -> None:
    n = conn.execute(sa.select(s.topics.c.partitions).where(s.topics.c.name == topic)).scalar()
    if n is None:
        raise UnknownTopicError(f"unknown topic {topic!r}")
    raise UnknownPartitionError(f"topic {topic!r} has no partition {partition} (has {n})")


def stats(db: Database, *, levels: bool = True) -> StoreStats:
    """Live files, bytes and live segments per level; files and bytes per state.
    `levels=False` leaves the per-level counts out (empty): the per-state counts read only
    the files table (the compactor's GC-backlog gauge, every round)."""
    f, sg = s.files.c, s.segments.c
    level_files: list[Any] = []
    level_segs: dict[int, int] = {}
    with db.read() as conn:
        by_state = conn.execute(
            sa.select(f.state, sa.func.count(), sa.func.coalesce(sa.func.sum(f.size), 0))
            .group_by(f.state)
        ).all()
        if levels:
            level_files = list(conn.execute(
                sa.select(f.level, sa.func.count(), sa.func.coalesce(sa.func.sum(f.size), 0))
                .where(f.state == s.FILE_LIVE).group_by(f.level)
            ).all())
            level_segs = {
                int(lv): int(n) for lv, n in conn.execute(
                    sa.select(f.level, sa.func.count())
                    .select_from(s.segments.join(s.files, f.id == sg.file_id))
                    .where(s.LIVE).group_by(f.level)
                )
            }
        n_topics = conn.execute(sa.select(sa.func.count()).select_from(s.topics)
                               .where(s.VISIBLE_TOPIC)).scalar()
    return StoreStats(
        levels=tuple(LevelStats(int(lv), int(n), int(b), int(level_segs.get(lv, 0)))
                     for lv, n, b in sorted(level_files)),
        files_by_state={st: int(n) for st, n, _ in by_state},
        bytes_by_state={st: int(b) for st, _, b in by_state},
        topics=int(n_topics or 0),
    )


def snapshot(db: Database) -> Snapshot:
    """Topics, partitions, live files and their live segments, read in one consistent
    snapshot (PostgreSQL: REPEATABLE READ; SQLite: one read transaction). A file is `leased`
    when a leased, unexpired job holds it (also listed in `leased_file_ids`).

    Incremental: the handle remembers each live file's segments with the file's
    segments_version (schema v5: a live file's live segments change only with it), so only
    files committed or shortened since the last snapshot have their segments read; the rest
    is one row per topic, partition and live file. The first snapshot reads everything.
    """
    t, f = s.topics, s.files
    known = db.segment_cache
    with db.read(consistent=True) as conn:
        now = db.clock.now_ms()
        topic_rows = conn.execute(sa.select(t).order_by(t.c.name)).all()
        names = {r.id: r.name for r in topic_rows}
        part_rows = conn.execute(sa.select(s.partitions).order_by(
            s.partitions.c.topic_id, s.partitions.c.partition)).all()
        unstable = txnlog.first_unstable(conn)
        file_rows = conn.execute(
            sa.select(f).where(f.c.state == s.FILE_LIVE).order_by(f.c.id)).all()
        held = held_jobs(conn, [r.job_id for r in file_rows if r.job_id is not None], now)
        stale = [int(r.id) for r in file_rows
                 if known.get(r.id, (None,))[0] != r.segments_version]
        if len(stale) == len(file_rows):  # the first snapshot: one scan, no id list
            rows = _driver_rows(conn, _snapshot_query(None))
        else:
            rows = []
            for i in range(0, len(stale), _IDS_PER_QUERY):
                rows += _driver_rows(conn, _snapshot_query(stale[i:i + _IDS_PER_QUERY]))
    by_id = {int(r.id): r for r in file_rows}
    read = {}
    for fid, group in itertools.groupby(rows, key=lambda r: int(r[_FILE_ID])):
        row = by_id.get(fid)
        if row is not None:
            read[fid] = tuple(live_segment_info(x, names[x[_TOPIC_ID]], row.object_key,
                                                row.size) for x in group)
    reread = set(stale)
    segments = {fid: read.get(fid, ()) if fid in reread else known[fid][1] for fid in by_id}
    db.segment_cache = {fid: (int(r.segments_version), segments[fid])
                        for fid, r in by_id.items()}
    return Snapshot(
        taken_at_ms=now,
        topics=tuple(topic_info(r) for r in topic_rows),
        partitions=tuple(partition_info(names[r.topic_id], r,
                                        unstable.get((r.topic_id, r.partition)))
                         for r in part_rows),
        files=tuple(file_info(r, leased=r.job_id in held) for r in file_rows),
        file_segments=segments,
        leased_file_ids=frozenset(int(r.id) for r in file_rows if r.job_id in held),
    )


# Files whose segments one snapshot query reads by id (a bounded IN list).
_IDS_PER_QUERY = 500
# Where a snapshot row (SNAPSHOT_COLUMNS) holds its file id and topic id.
_FILE_ID, _TOPIC_ID = ([c.name for c in SNAPSHOT_COLUMNS].index(name)
                       for name in ("file_id", "topic_id"))


def _snapshot_query(file_ids: Sequence[int] | None) -> sa.Select[Any]:
    """The live segments of these files (None: of every file), by file, topic, partition."""
    sg = s.segments.c
    query = sa.select(*SNAPSHOT_COLUMNS).where(s.LIVE)
    if file_ids is not None:
        query = query.where(sg.file_id.in_(file_ids))
    return query.order_by(sg.file_id, sg.topic_id, sg.partition)


def _driver_rows(conn: sa.Connection, query: sa.Select[Any]) -> list[Sequence[Any]]:
    """`query`'s rows as the driver returns them, in the connection's transaction: plain
    tuples, without SQLAlchemy's per-row processing, which costs more than the query when
    a first snapshot reads 100,000 segments. Bound values are inlined (integers only)."""
    sql = str(query.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
    cursor = conn.connection.cursor()
    try:
        cursor.execute(sql)
        return list(cursor.fetchall())
    finally:
        cursor.close()
