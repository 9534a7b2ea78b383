"""`MetadataStore`: topics, partitions, files and segments on SQLite or PostgreSQL.

Concurrency model. Every write is one transaction. On SQLite writes start with
`BEGIN IMMEDIATE`, so concurrent writers (threads or processes) queue on the database write
lock (busy timeout 30 s) instead of failing with "database is locked" on a lock upgrade; WAL
lets readers run alongside. On PostgreSQL (READ COMMITTED) `commit_file` locks the file row and
then the partition rows in sorted (topic_id, partition) order with `SELECT … FOR UPDATE`, so
committers touching overlapping partitions serialize per partition and cannot deadlock.
Compaction jobs lock their input file rows (in id order), then the job row — in lease_job,
commit_compaction and release_job alike — so a lease racing a commit waits, not deadlocks.

Failure model of a commit: an error before COMMIT is sent means nothing was applied
(`CommitConflictError`, retriable); an error during COMMIT is resolved by reading the file's
state back (its id is the commit's stable identity) and becomes `CommitUnknownError` only if
that read fails too.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event

from clock import SYSTEM_CLOCK, Clock

from . import schema as s
from .errors import (
    CommitConflictError,
    CommitUnknownError,
    FileStateError,
    InvalidCommitError,
    InvalidPartitionsError,
    InvalidTopicError,
    JobConflictError,
    JobLeasedError,
    MetadataError,
    ObjectKeyExistsError,
    OffsetOutOfRangeError,
    SchemaVersionError,
    StaleLeaseError,
    TopicExistsError,
    UnknownFileError,
    UnknownPartitionError,
    UnknownTopicError,
    UnsupportedUrlError,
)
from .models import (
    ChunkMeta,
    CompactionCommit,
    CompactionOutput,
    FileInfo,
    JobInfo,
    Lease,
    LevelStats,
    PartitionInfo,
    RetentionChange,
    RetentionResult,
    SegmentInfo,
    Snapshot,
    StoreStats,
    TopicInfo,
)
from .topicconfig import TopicConfig, validate_configs

log = logging.getLogger(__name__)

DEFAULT_URL = "sqlite:///./silt-data/metadata.db"
SQLITE_BUSY_TIMEOUT_S = 30.0
# pg_advisory_xact_lock key serializing schema migrations across processes ("silt").
MIGRATION_LOCK_KEY = 0x73696C74
COMMIT_ATTEMPTS = 3
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


# segments columns in the order of the agent commit's row tuples, with PostgreSQL array types.
_SEGMENT_ROW: tuple[tuple[str, str], ...] = (
    ("file_id", "bigint"), ("topic_id", "bigint"), ("partition", "integer"),
    ("base_offset", "bigint"), ("last_offset", "bigint"), ("record_count", "bigint"),
    ("data_pos", "bigint"), ("data_len", "bigint"), ("hash_pos", "bigint"),
    ("hash_count", "bigint"), ("batch_count", "integer"), ("min_timestamp", "bigint"),
    ("max_timestamp", "bigint"), ("tombstone_count", "bigint"), ("frame_crc", "bigint"),
    ("live", "boolean"), ("created_at_ms", "bigint"), ("cleaned_at_ms", "bigint"),
)


def engine_url(url: str) -> str:
    """Map user-facing URLs to SQLAlchemy ones (`postgresql://` → `postgresql+psycopg://`)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    if url.startswith(("postgresql+psycopg://", "sqlite:///")):
        return url
    raise UnsupportedUrlError(
        f"unsupported metadata URL {url!r}: use sqlite:///path/to/file.db or postgresql://..."
    )


def _make_engine(url: str) -> sa.Engine:
    target = engine_url(url)
    if target.startswith("postgresql"):
        return sa.create_engine(target, pool_pre_ping=True)
    path = sa.make_url(target).database
    if not path or path == ":memory:" or path.startswith("file:"):
        raise UnsupportedUrlError(
            f"metadata URL {url!r} must name a database file (in-memory SQLite is per connection)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    engine = sa.create_engine(target, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (the driver's implicit BEGIN is always DEFERRED).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        # Switching to WAL needs an exclusive lock; SQLite may answer BUSY at once (no busy
        # handler) while another connection opens the same new file: retry briefly.
        for attempt in range(50):
            try:
                cur.execute("PRAGMA journal_mode = WAL")
                break
            except sqlite3.OperationalError:
                if attempt == 49:
                    raise
                time.sleep(0.02 * (attempt + 1))
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("silt_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _topic_info(row: sa.Row[Any]) -> TopicInfo:
    configs: dict[str, str] = json.loads(row.configs)
    return TopicInfo(
        id=row.id,
        name=row.name,
        partitions=row.partitions,
        config=TopicConfig.from_map(configs),
        configs=configs,
        created_at_ms=row.created_at_ms,
    )


def _file_info(row: sa.Row[Any]) -> FileInfo:
    f = s.files.c
    return FileInfo(**{c.name: row._mapping[c] for c in f})


_SEGMENT_COLUMNS = [
    *s.segments.c,
    s.topics.c.name.label("topic"),
    s.files.c.object_key,
    s.files.c.size.label("file_size"),
]


_SEGMENT_FIELDS = tuple(fld.name for fld in dataclasses.fields(SegmentInfo))


def _segment_info(row: sa.Row[Any]) -> SegmentInfo:
    """A SegmentInfo from a row holding (at least) its fields by name. A plain dict, not
    the row's mapping: snapshots build thousands of these, and name lookups on a row
    mapping cost several times more."""
    d = dict(zip(row._fields, row, strict=True))
    return SegmentInfo(*[d[name] for name in _SEGMENT_FIELDS])


def _job_info(row: sa.Row[Any]) -> JobInfo:
    return JobInfo(
        id=int(row.id), spec_id=row.spec_id, state=row.state,
        input_file_ids=tuple(json.loads(row.input_file_ids)), owner=row.owner,
        fence=int(row.fence), lease_expires_ms=int(row.lease_expires_ms),
        attempts=int(row.attempts), created_at_ms=int(row.created_at_ms),
        updated_at_ms=int(row.updated_at_ms),
        result=None if row.result is None else json.loads(row.result),
        input_segments=int(row.input_segments),
    )


def _not_live(rows: Sequence[sa.Row[Any]], ids: Sequence[int]) -> str | None:
    """Why one of the files `ids` (locked `rows`) is not live, or None."""
    states = {int(r.id): str(r.state) for r in rows}
    for fid in ids:
        if states.get(fid) != s.FILE_LIVE:
            return f"input file {fid} is {states.get(fid, 'unknown')}, not live"
    return None


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
        if min(o.size, o.data_offset, o.data_length, o.meta_offset, o.meta_length) < 0:
            raise InvalidCommitError(f"output file {o.file_id}: negative layout field")
        for x in o.segments:
            where = f"output {x.topic}/{x.partition} [{x.base_offset}, {x.last_offset}]"
            if not 0 <= x.base_offset <= x.last_offset:
                raise InvalidCommitError(f"{where}: need 0 <= base_offset <= last_offset")
            if not 0 <= x.record_count <= x.last_offset - x.base_offset + 1:
                raise InvalidCommitError(f"{where}: record_count {x.record_count} out of range")
            if min(x.data_pos, x.data_len, x.hash_pos, x.hash_count, x.batch_count,
                   x.tombstone_count) < 0:
                raise InvalidCommitError(f"{where}: negative position or count")
            spans.setdefault((x.topic, x.partition), []).append((x.base_offset, x.last_offset))
    for (topic, part), ranges in spans.items():
        ranges.sort()
        for (_, last), (base, _) in itertools.pairwise(ranges):
            if base <= last:
                raise InvalidCommitError(f"two output segments of {topic}/{part} overlap")


def _validate_chunks(chunks: Sequence[ChunkMeta]) -> None:
    if not chunks:
        raise InvalidCommitError("a committed file must hold at least one chunk")
    seen: set[tuple[str, int]] = set()
    for c in chunks:
        tp = (c.topic, c.partition)
        if tp in seen:
            raise InvalidCommitError(f"two chunks for {c.topic}/{c.partition} in one file")
        seen.add(tp)
        if c.offset_span < 1 or not 0 <= c.record_count <= c.offset_span:
            raise InvalidCommitError(
                f"chunk {c.topic}/{c.partition}: need 0 <= record_count={c.record_count}"
                f" <= offset_span={c.offset_span} and offset_span >= 1"
            )
        if min(c.data_pos, c.data_len, c.hash_pos, c.hash_count, c.batch_count,
               c.tombstone_count) < 0:
            raise InvalidCommitError(f"chunk {c.topic}/{c.partition}: negative position or count")


class MetadataStore:
    """The cluster's metadata: topics and configs, partitions' offsets, objects and segments.

    Thread-safe: one handle may be shared by threads (each call checks out its own
    connection). Open with `MetadataStore.open(url)`.
    """

    def __init__(self, engine: sa.Engine, url: str, clock: Clock) -> None:
        self._engine = engine
        self._url = url
        self._clock = clock
        self._pg = engine.dialect.name == "postgresql"
        self._secret: bytes | None = None

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def open(cls, url: str = DEFAULT_URL, *, clock: Clock = SYSTEM_CLOCK) -> MetadataStore:
        """Connect, then create or migrate the schema (idempotent; concurrent opens are safe).

        Each migration runs in its own transaction that re-reads the version under a lock
        (PostgreSQL advisory lock / SQLite write lock), so two processes opening a fresh
        database apply each migration exactly once. A crash mid-migration rolls it back.
        """
        store = cls(_make_engine(url), url, clock)
        try:
            store._migrate()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        """Release all connections."""
        self._engine.dispose()

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The URL the store was opened with."""
        return self._url

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self._engine.dialect.name

    def schema_version(self) -> int:
        """The applied schema version."""
        with self._read() as conn:
            return self._version(conn)

    def _version(self, conn: sa.Connection) -> int:
        if not sa.inspect(conn).has_table(s.schema_version.name):
            return 0
        v = conn.execute(sa.select(sa.func.max(s.schema_version.c.version))).scalar()
        return int(v or 0)

    def _migrate(self) -> None:
        while True:
            with self._write() as conn:
                if self._pg:
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
                s.md.create_all(conn, tables=[s.schema_version])
                version = self._version(conn)
                if version > s.LATEST_VERSION:
                    raise SchemaVersionError(
                        f"metadata schema version {version} is newer than this code"
                        f" (knows up to {s.LATEST_VERSION}); upgrade siltstream"
                    )
                if version == s.LATEST_VERSION:
                    return
                now = self._clock.now_ms()
                s.MIGRATIONS[version](conn, now)
                conn.execute(s.schema_version.insert().values(
                    version=version + 1, applied_at_ms=now))
                log.info("metadata schema migrated to version %d", version + 1)

    @contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        """A read transaction (SQLite: deferred, a consistent snapshot once it reads)."""
        with self._engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def _write(self) -> Iterator[sa.Connection]:
        """A write transaction (SQLite: BEGIN IMMEDIATE, i.e. the database write lock)."""
        with self._engine.connect() as conn:
            conn.execution_options(silt_write=True)
            with conn.begin():
                yield conn

    def cluster_secret(self) -> bytes:
        """The cluster's 32 random bytes, created with the schema (key for BLAKE2b key hashes)."""
        if self._secret is None:
            with self._read() as conn:
                secret = conn.execute(
                    sa.select(s.cluster.c.secret).where(s.cluster.c.id == 1)
                ).scalar_one()
            self._secret = bytes(secret)
        return self._secret

    # ------------------------------------------------------------------ topics

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str] | None = None
    ) -> TopicInfo:
        """Create a topic with `partitions` empty partitions, in one transaction.

        Crash before COMMIT: no topic. After: the topic and all its partitions exist.
        """
        if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
            raise InvalidTopicError(
                f"invalid topic name {name!r}: 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
            )
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise InvalidPartitionsError(f"partition count must be >= 1, got {partitions!r}")
        stored = validate_configs(dict(configs or {}))
        now = self._clock.now_ms()
        try:
            with self._write() as conn:
                exists = conn.execute(
                    sa.select(s.topics.c.id).where(s.topics.c.name == name)
                ).first()
                if exists is not None:
                    raise TopicExistsError(f"topic {name!r} already exists")
                topic_id = conn.execute(
                    s.topics.insert().values(
                        name=name, partitions=partitions,
                        configs=json.dumps(stored, sort_keys=True), created_at_ms=now,
                    ).returning(s.topics.c.id)
                ).scalar_one()
                conn.execute(s.partitions.insert(), [
                    {"topic_id": topic_id, "partition": p, "log_start_offset": 0,
                     "next_offset": 0}
                    for p in range(partitions)
                ])
        except sa.exc.IntegrityError as exc:  # a concurrent creator won the unique name
            raise TopicExistsError(f"topic {name!r} already exists") from exc
        return TopicInfo(topic_id, name, partitions, TopicConfig.from_map(stored), stored, now)

    def get_topic(self, name: str) -> TopicInfo:
        """The topic called `name`; UnknownTopicError if there is none."""
        with self._read() as conn:
            row = conn.execute(sa.select(s.topics).where(s.topics.c.name == name)).first()
        if row is None:
            raise UnknownTopicError(f"unknown topic {name!r}")
        return _topic_info(row)

    def list_topics(self) -> list[TopicInfo]:
        """All topics, by name."""
        with self._read() as conn:
            rows = conn.execute(sa.select(s.topics).order_by(s.topics.c.name)).all()
        return [_topic_info(r) for r in rows]

    def partitions(self, topic: str) -> list[PartitionInfo]:
        """The topic's partitions in order, with their log start and next offsets."""
        t, p = s.topics.c, s.partitions.c
        with self._read() as conn:
            topic_id = conn.execute(sa.select(t.id).where(t.name == topic)).scalar()
            if topic_id is None:
                raise UnknownTopicError(f"unknown topic {topic!r}")
            rows = conn.execute(
                sa.select(p.partition, p.log_start_offset, p.next_offset, p.clean_offset)
                .where(p.topic_id == topic_id).order_by(p.partition)
            ).all()
        return [PartitionInfo(topic, r.partition, r.log_start_offset, r.next_offset,
                              r.clean_offset) for r in rows]

    # ------------------------------------------------------------------ files

    def register_pending_file(
        self, object_key: str, *, level: int = 0, holds_compacted: bool = False
    ) -> int:
        """Record that `object_key` may be uploaded; returns the file id for `commit_file`.

        Call before the upload. Crash before COMMIT: no row and (the caller not having
        uploaded yet) no object. After: a pending row that GC removes, with its object if any,
        once it is older than the GC grace period.
        """
        now = self._clock.now_ms()
        try:
            with self._write() as conn:
                return int(conn.execute(
                    s.files.insert().values(
                        object_key=object_key, level=level, state=s.FILE_PENDING,
                        holds_compacted=holds_compacted, created_at_ms=now,
                        state_changed_at_ms=now,
                    ).returning(s.files.c.id)
                ).scalar_one())
        except sa.exc.IntegrityError as exc:
            raise ObjectKeyExistsError(f"object key {object_key!r} is already registered") from exc

    def commit_file(
        self,
        file_id: int,
        *,
        size: int,
        data_offset: int,
        data_length: int,
        meta_offset: int,
        meta_length: int,
        chunks: Sequence[ChunkMeta],
    ) -> dict[tuple[str, int], int]:
        """Make an uploaded object's chunks visible, assigning offsets; returns their bases.

        One transaction: flip the file pending → live (locking its row), lock the partitions
        in sorted order, give each chunk the base offset `next_offset` and advance it by
        `offset_span`, insert the segments. Validation failures (FileStateError,
        UnknownTopicError, UnknownPartitionError, InvalidCommitError) commit nothing.

        Crash before COMMIT: the file stays pending (GC deletes it); after: everything visible.
        If COMMIT itself fails the file's state is read back: live means it was applied (the
        assigned bases are returned), pending means it was not (retried). Transient database
        errors are retried up to COMMIT_ATTEMPTS times, then raise CommitConflictError.
        """
        _validate_chunks(chunks)
        layout = {"size": size, "data_offset": data_offset, "data_length": data_length,
                  "meta_offset": meta_offset, "meta_length": meta_length}
        last_exc: Exception | None = None
        for attempt in range(COMMIT_ATTEMPTS):
            if attempt:
                time.sleep(0.05 * attempt)
            try:
                return self._commit_once(file_id, layout, chunks)
            except _NotApplied as exc:
                last_exc = exc.cause
                log.warning("commit of file %d not applied (attempt %d): %s",
                            file_id, attempt + 1, exc.cause)
            except _OutcomeUnknown as exc:
                bases = self._resolve_commit(file_id, exc.cause)
                if bases is not None:
                    return bases
                last_exc = exc.cause
        raise CommitConflictError(
            f"commit of file {file_id} not applied after {COMMIT_ATTEMPTS} attempts: {last_exc}"
        ) from last_exc

    def commit_files(
        self, files: Sequence[tuple[int, Mapping[str, int], Sequence[ChunkMeta]]]
    ) -> list[dict[tuple[str, int], int]]:
        """Commit several uploaded objects in ONE transaction (all visible, or none).

        `files` holds (file_id, layout, chunks) with layout the keyword arguments of
        `commit_file` (size, data_offset, data_length, meta_offset, meta_length). Offsets are
        assigned file after file, in the order given. Used by writers that must publish a
        whole job at once (Spark). Failures commit nothing; a failed COMMIT raises
        CommitUnknownError (no read-back: callers decide from the files' states).
        """
        for _, _, chunks in files:
            _validate_chunks(chunks)
        try:
            return self._commit_many(files)
        except _NotApplied as exc:
            raise CommitConflictError(f"commit of {len(files)} files not applied: {exc.cause}"
                                      ) from exc.cause
        except _OutcomeUnknown as exc:
            raise CommitUnknownError(f"commit of {len(files)} files: outcome unknown:"
                                     f" {exc.cause}") from exc.cause

    def _commit_once(
        self, file_id: int, layout: Mapping[str, int], chunks: Sequence[ChunkMeta]
    ) -> dict[tuple[str, int], int]:
        return self._commit_many([(file_id, layout, chunks)])[0]

    def _commit_many(
        self, files: Sequence[tuple[int, Mapping[str, int], Sequence[ChunkMeta]]]
    ) -> list[dict[tuple[str, int], int]]:
        f, t = s.files.c, s.topics.c
        now = self._clock.now_ms()
        conn = self._engine.connect()
        try:
            conn.execution_options(silt_write=True)
            trans = conn.begin()
            try:
                # 1. pending → live, taking the file row locks (a concurrent abandon/GC waits).
                for file_id, layout, _ in sorted(files, key=lambda x: x[0]):
                    flipped = conn.execute(
                        s.files.update()
                        .where(f.id == file_id, f.state == s.FILE_PENDING)
                        .values(state=s.FILE_LIVE, state_changed_at_ms=now, **layout)
                    ).rowcount
                    if flipped != 1:
                        state = conn.execute(sa.select(f.state).where(f.id == file_id)).scalar()
                        if state is None:
                            raise UnknownFileError(f"no file with id {file_id}")
                        raise FileStateError(
                            f"file {file_id} is {state}, not pending: cannot commit")
                all_chunks = [c for _, _, chunks in files for c in chunks]
                # 2. resolve topic names.
                names = sorted({c.topic for c in all_chunks})
                ids = {r.name: r.id for r in conn.execute(
                    sa.select(t.id, t.name).where(t.name.in_(names)))}
                for name in names:
                    if name not in ids:
                        raise UnknownTopicError(f"unknown topic {name!r}")
                # 3. lock the partition rows in sorted (topic_id, partition) order.
                wanted = sorted({(ids[c.topic], c.partition) for c in all_chunks})
                next_offset = self._lock_partitions(conn, wanted)
                for c in all_chunks:
                    if (ids[c.topic], c.partition) not in next_offset:
                        raise UnknownPartitionError(
                            f"topic {c.topic!r} has no partition {c.partition}")
                # 4. assign offsets and insert segments, file after file.
                results: list[dict[tuple[str, int], int]] = []
                seg_rows = []
                for file_id, _, chunks in files:
                    bases: dict[tuple[str, int], int] = {}
                    for c in chunks:
                        key = (ids[c.topic], c.partition)
                        base = next_offset[key]
                        next_offset[key] = base + c.offset_span
                        bases[(c.topic, c.partition)] = base
                        seg_rows.append((
                            file_id, key[0], c.partition, base, base + c.offset_span - 1,
                            c.record_count, c.data_pos, c.data_len, c.hash_pos, c.hash_count,
                            c.batch_count, c.min_timestamp, c.max_timestamp,
                            c.tombstone_count, c.frame_crc, True, now, None))
                    results.append(bases)
                self._insert_segments(conn, seg_rows)
                self._set_next_offsets(conn, sorted(next_offset.items()))
            except MetadataError:
                trans.rollback()
                raise
            except sa.exc.DBAPIError as exc:
                _rollback_quietly(trans)
                raise _NotApplied(exc) from exc
            # 5. COMMIT: a failure here leaves the outcome unknown until read back.
            try:
                trans.commit()
            except sa.exc.DBAPIError as exc:
                raise _OutcomeUnknown(exc) from exc
            return results
        finally:
            _close_quietly(conn)

    def _lock_partitions(self, conn: sa.Connection,
                         wanted: Sequence[tuple[int, int]]) -> dict[tuple[int, int], int]:
        """Lock the (topic_id, partition) rows in sorted order; their next offsets.

        One statement driven by the wanted keys (primary-key probes), passed as arrays
        (PostgreSQL: unnest, rows locked FOR UPDATE in key order) or one JSON text (SQLite:
        json_each; the write transaction already holds the database lock) rather than a
        thousand-placeholder IN list, whose compiling and parsing dominated agent commits.
        """
        if self._pg:
            rows = conn.exec_driver_sql(
                'SELECT p.topic_id, p."partition", p.next_offset FROM partitions AS p '
                'JOIN unnest(%s::bigint[], %s::integer[]) AS v(t, q) '
                'ON p.topic_id = v.t AND p."partition" = v.q '
                'ORDER BY p.topic_id, p."partition" FOR UPDATE OF p',
                ([k[0] for k in wanted], [k[1] for k in wanted])).all()
        else:
            rows = conn.exec_driver_sql(
                'SELECT p.topic_id, p."partition", p.next_offset FROM json_each(?) AS j '
                'JOIN partitions AS p ON p.topic_id = json_extract(j.value, \'$[0]\') '
                'AND p."partition" = json_extract(j.value, \'$[1]\')',
                (json.dumps(wanted),)).all()
        return {(int(r[0]), int(r[1])): int(r[2]) for r in rows}

    def _insert_segments(self, conn: sa.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        """Insert segment rows (tuples in `_SEGMENT_ROW` order) in one driver call.

        An agent commit inserts one row per partition (1,000 and more): SQLAlchemy's
        per-row parameter processing and psycopg's per-row pipelined executemany cost tens
        of milliseconds per commit, so this goes to the driver directly — SQLite's C
        executemany over tuples, PostgreSQL one INSERT … SELECT FROM unnest(column arrays).
        """
        if not rows:
            return
        cols = ", ".join(f'"{name}"' for name, _ in _SEGMENT_ROW)
        if self._pg:
            arrays = ", ".join(f"%s::{pg}[]" for _, pg in _SEGMENT_ROW)
            conn.exec_driver_sql(f"INSERT INTO segments ({cols}) SELECT * FROM unnest({arrays})",
                                 tuple(list(col) for col in zip(*rows, strict=True)))
        else:
            marks = ", ".join("?" for _ in _SEGMENT_ROW)
            conn.exec_driver_sql(f"INSERT INTO segments ({cols}) VALUES ({marks})", list(rows))

    def _set_next_offsets(self, conn: sa.Connection,
                          items: Sequence[tuple[tuple[int, int], int]]) -> None:
        """partitions.next_offset for ((topic_id, partition), next_offset) pairs, in one
        driver call (see `_insert_segments`); the rows are already locked."""
        if not items:
            return
        if self._pg:
            conn.exec_driver_sql(
                'UPDATE partitions AS p SET next_offset = v.n FROM unnest('
                '%s::bigint[], %s::integer[], %s::bigint[]) AS v(t, q, n) '
                'WHERE p.topic_id = v.t AND p."partition" = v.q',
                ([k[0] for k, _ in items], [k[1] for k, _ in items], [n for _, n in items]))
        else:
            conn.exec_driver_sql(
                'UPDATE partitions SET next_offset = ? WHERE topic_id = ? AND "partition" = ?',
                [(n, k[0], k[1]) for k, n in items])

    def _resolve_commit(
        self, file_id: int, cause: Exception
    ) -> dict[tuple[str, int], int] | None:
        """After a failed COMMIT: the bases if the commit was applied, None if it was not."""
        try:
            with self._read() as conn:
                state = conn.execute(
                    sa.select(s.files.c.state).where(s.files.c.id == file_id)).scalar()
                if state == s.FILE_LIVE:
                    rows = conn.execute(
                        sa.select(s.topics.c.name, s.segments.c.partition,
                                  s.segments.c.base_offset)
                        .join(s.topics, s.topics.c.id == s.segments.c.topic_id)
                        .where(s.segments.c.file_id == file_id)
                    ).all()
                    return {(r.name, r.partition): r.base_offset for r in rows}
        except sa.exc.DBAPIError as exc:
            raise CommitUnknownError(
                f"commit of file {file_id} failed during COMMIT ({cause}) and its outcome"
                f" could not be read back: {exc}"
            ) from exc
        if state == s.FILE_PENDING:
            return None
        raise CommitUnknownError(
            f"commit of file {file_id} failed during COMMIT ({cause}); file is now {state}"
        )

    def abandon_file(self, file_id: int) -> None:
        """Mark a pending file abandoned: its commit will not happen; GC deletes the object.

        Idempotent for files already abandoned, deleting or deleted; FileStateError if live.
        Crash before COMMIT: the file stays pending, which GC treats the same way.
        """
        f = s.files.c
        with self._write() as conn:
            state = conn.execute(
                sa.select(f.state).where(f.id == file_id).with_for_update()).scalar()
            if state is None:
                raise UnknownFileError(f"no file with id {file_id}")
            if state == s.FILE_LIVE:
                raise FileStateError(f"file {file_id} is live: cannot abandon a committed file")
            if state == s.FILE_PENDING:
                conn.execute(s.files.update().where(f.id == file_id, f.state == s.FILE_PENDING)
                             .values(state=s.FILE_ABANDONED,
                                     state_changed_at_ms=self._clock.now_ms()))

    def get_file(self, file_id: int) -> FileInfo:
        """One file's row; UnknownFileError if missing."""
        with self._read() as conn:
            row = conn.execute(sa.select(s.files).where(s.files.c.id == file_id)).first()
            if row is None:
                raise UnknownFileError(f"no file with id {file_id}")
            held = self._held_jobs(conn, [] if row.job_id is None else [row.job_id],
                                   self._clock.now_ms())
        return dataclasses.replace(_file_info(row), leased=row.job_id in held)

    def files_to_gc(self, older_than_ms: int) -> list[FileInfo]:
        """Files whose objects may be deleted: pending, abandoned, deleting and retired files
        whose state changed at or before `older_than_ms`.

        Pass `now - grace` (compactor default 60 s, like Kafka's file.delete.delay.ms): a
        pending file younger than that may still be uploading, and a file retired by a
        compaction more recently may still be read by a reader that found its segments
        before the swap. A retired file is never listed before the grace has passed.
        """
        f = s.files.c
        gc_states = (s.FILE_PENDING, s.FILE_ABANDONED, s.FILE_DELETING, s.FILE_RETIRED)
        with self._read() as conn:
            rows = conn.execute(
                sa.select(s.files)
                .where(f.state.in_(gc_states), f.state_changed_at_ms <= older_than_ms)
                .order_by(f.id)
            ).all()
        return [_file_info(r) for r in rows]

    def mark_deleting(self, file_ids: Iterable[int]) -> list[int]:
        """GC step 1: pending/abandoned/retired → deleting (a late commit then fails cleanly).

        Pass ids from `files_to_gc` (which applies the grace period). Returns the ids that are
        now deleting; delete only their objects (step 2). Live files are never touched.
        Crash before COMMIT: nothing changed; after: the files are listed by `files_to_gc`
        until `mark_deleted`.
        """
        return self._transition(
            file_ids, (s.FILE_PENDING, s.FILE_ABANDONED, s.FILE_DELETING, s.FILE_RETIRED),
            s.FILE_DELETING)

    def mark_deleted(self, file_ids: Iterable[int]) -> list[int]:
        """GC step 3, after the objects are gone: deleting/abandoned/pending → deleted.

        Returns the ids changed (live files are never touched). Crash before COMMIT: the files
        are listed again and their (already deleted) objects deleted again, harmlessly.
        """
        return self._transition(file_ids, (s.FILE_PENDING, s.FILE_ABANDONED, s.FILE_DELETING),
                                s.FILE_DELETED)

    def _transition(self, file_ids: Iterable[int], from_states: Sequence[str],
                    to_state: str) -> list[int]:
        ids = sorted(set(file_ids))
        if not ids:
            return []
        f = s.files.c
        with self._write() as conn:
            changed = conn.execute(
                s.files.update()
                .where(f.id.in_(ids), f.state.in_(from_states))
                .values(state=to_state, state_changed_at_ms=self._clock.now_ms())
                .returning(f.id)
            ).scalars().all()
        return sorted(int(i) for i in changed)

    # ------------------------------------------------------------------ retention

    def apply_retention(self) -> RetentionResult:
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
        now = self._clock.now_ms()
        with self._write() as conn:
            topics = [_topic_info(r) for r in conn.execute(sa.select(s.topics))]
            rules = {ti.id: ti for ti in topics if ti.config.deletes and (
                ti.config.retention_ms >= 0 or ti.config.retention_bytes >= 0)}
            if not rules:
                return RetentionResult((), ())
            due = self._retention_prefixes(conn, rules, now)
            if not due:
                return RetentionResult((), ())
            wanted = sorted({r.file_id for segs in due.values() for r in segs})
            locked = self._lock_files(conn, wanted)
            held = self._held_jobs(conn, [r.job_id for r in locked if r.job_id is not None],
                                   now)
            usable = {int(r.id) for r in locked
                      if r.state == s.FILE_LIVE and r.job_id not in held}
            if self._pg:  # a compaction may have swapped segments before the locks were taken
                due = self._retention_prefixes(conn, rules, now)  # (SQLite: BEGIN IMMEDIATE)
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
                             .values(state=s.FILE_RETIRED, state_changed_at_ms=now,
                                     job_id=None))
        for c in changes:
            log.info("retention: %s/%d log start -> %d (%d segments, %d records, %d bytes)",
                     c.topic, c.partition, c.log_start_offset, c.segments, c.records, c.bytes)
        return RetentionResult(tuple(changes), tuple(emptied))

    @staticmethod
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
        for (tid, part), group in itertools.groupby(rows, key=lambda r: (r.topic_id,
                                                                          r.partition)):
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

    # ------------------------------------------------------------------ reads

    def find_segments(
        self, topic: str, partition: int, from_offset: int, *, limit: int | None = None
    ) -> list[SegmentInfo]:
        """Live segments of a partition with last_offset >= from_offset, in offset order.

        One statement: the partition row (for the log start check) LEFT JOINed on true to a
        derived table of its live segments — a range scan of the index (topic_id, partition,
        last_offset) WHERE live with its own ORDER BY … LIMIT, so a read stops after `limit`
        index entries instead of sorting every later segment (both planners would otherwise
        sort them all). OffsetOutOfRangeError if from_offset is below the log start; an
        offset at or past next_offset gives [].
        """
        t, p, sg, f = s.topics, s.partitions, s.segments, s.files
        topic_id = sa.select(t.c.id).where(t.c.name == topic).scalar_subquery()
        inner = (
            sa.select(*sg.c, f.c.object_key, f.c.size.label("file_size"))
            .select_from(sg.join(f, f.c.id == sg.c.file_id))
            .where(
                sg.c.topic_id == topic_id,
                sg.c.partition == partition,
                s.LIVE,
                sg.c.last_offset >= from_offset,
            )
            .order_by(sg.c.last_offset)
        )
        if limit is not None:
            inner = inner.limit(max(limit, 1))
        seg = inner.subquery("seg")
        query = (
            sa.select(p.c.log_start_offset, t.c.name.label("topic"), *seg.c)
            .select_from(t.join(p, p.c.topic_id == t.c.id).outerjoin(seg, sa.true()))
            .where(t.c.name == topic, p.c.partition == partition)
            .order_by(seg.c.last_offset)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
            if not rows:
                self._raise_unknown(conn, topic, partition)
        log_start = rows[0].log_start_offset
        if from_offset < log_start:
            raise OffsetOutOfRangeError(
                f"offset {from_offset} of {topic}/{partition} is below log start {log_start}"
            )
        return [_segment_info(r) for r in rows if r.id is not None]

    def _raise_unknown(self, conn: sa.Connection, topic: str, partition: int) -> None:
        n = conn.execute(sa.select(s.topics.c.partitions).where(s.topics.c.name == topic)).scalar()
        if n is None:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        raise UnknownPartitionError(f"topic {topic!r} has no partition {partition} (has {n})")

    def stats(self) -> StoreStats:
        """Live files, bytes and live segments per level; files and bytes per state."""
        f, sg = s.files.c, s.segments.c
        with self._read() as conn:
            by_state = conn.execute(
                sa.select(f.state, sa.func.count(), sa.func.coalesce(sa.func.sum(f.size), 0))
                .group_by(f.state)
            ).all()
            level_files = conn.execute(
                sa.select(f.level, sa.func.count(), sa.func.coalesce(sa.func.sum(f.size), 0))
                .where(f.state == s.FILE_LIVE).group_by(f.level)
            ).all()
            level_segs: dict[int, int] = {
                int(lv): int(n) for lv, n in conn.execute(
                    sa.select(f.level, sa.func.count())
                    .select_from(s.segments.join(s.files, f.id == sg.file_id))
                    .where(s.LIVE).group_by(f.level)
                )
            }
            n_topics = conn.execute(sa.select(sa.func.count()).select_from(s.topics)).scalar()
        levels = tuple(
            LevelStats(int(lv), int(n), int(b), int(level_segs.get(lv, 0)))
            for lv, n, b in sorted(level_files)
        )
        return StoreStats(
            levels=levels,
            files_by_state={st: int(n) for st, n, _ in by_state},
            bytes_by_state={st: int(b) for st, _, b in by_state},
            topics=int(n_topics or 0),
        )

    def snapshot(self) -> Snapshot:
        """Topics, partitions, live files and live segments, read in one consistent snapshot
        (PostgreSQL: REPEATABLE READ; SQLite: one read transaction). A file is `leased` when
        a leased, unexpired job holds it (also listed in `leased_file_ids`)."""
        t, f, sg = s.topics, s.files, s.segments
        with self._engine.connect() as conn:
            if self._pg:
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                now = self._clock.now_ms()
                topic_rows = conn.execute(sa.select(t).order_by(t.c.name)).all()
                names = {r.id: r.name for r in topic_rows}
                part_rows = conn.execute(
                    sa.select(s.partitions).order_by(s.partitions.c.topic_id,
                                                     s.partitions.c.partition)
                ).all()
                file_rows = conn.execute(
                    sa.select(f).where(f.c.state == s.FILE_LIVE).order_by(f.c.id)
                ).all()
                held = self._held_jobs(conn, [r.job_id for r in file_rows
                                              if r.job_id is not None], now)
                seg_rows = conn.execute(
                    sa.select(*_SEGMENT_COLUMNS)
                    .select_from(sg.join(f, f.c.id == sg.c.file_id)
                                 .join(t, t.c.id == sg.c.topic_id))
                    .where(s.LIVE)
                    .order_by(sg.c.topic_id, sg.c.partition, sg.c.last_offset)
                ).all()
        return Snapshot(
            taken_at_ms=now,
            topics=tuple(_topic_info(r) for r in topic_rows),
            partitions=tuple(
                PartitionInfo(names[r.topic_id], r.partition, r.log_start_offset, r.next_offset,
                              r.clean_offset)
                for r in part_rows
            ),
            files=tuple(dataclasses.replace(_file_info(r), leased=r.job_id in held)
                        for r in file_rows),
            segments=tuple(_segment_info(r) for r in seg_rows),
            leased_file_ids=frozenset(int(r.id) for r in file_rows if r.job_id in held),
        )

    # ------------------------------------------------------------------ compaction jobs
    #
    # Lock order, everywhere: the input file rows (FOR UPDATE, in id order), then the job
    # row. lease_job, commit_compaction and release_job all follow it, so on PostgreSQL a
    # lease racing a commit of the same job waits for it instead of deadlocking with it.
    # (SQLite: BEGIN IMMEDIATE serializes writers; there are no row locks.)

    def lease_job(self, spec_id: str, input_file_ids: Sequence[int], *, owner: str,
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
        now = self._clock.now_ms()
        expires = now + lease_ms
        ended: JobConflictError | None = None
        lease: Lease | None = None
        try:
            with self._write() as conn:
                rows = self._lock_files(conn, ids)
                existing = conn.execute(
                    sa.select(s.jobs).where(j.spec_id == spec_id, j.state == s.JOB_LEASED)
                    .with_for_update()
                ).first()
                if existing is None:
                    problem = (_not_live(rows, ids)
                               or self._held_elsewhere(conn, rows, None, now))
                    if problem is not None:
                        raise JobConflictError(f"cannot lease {spec_id}: {problem}")
                    job_id = int(conn.execute(s.jobs.insert().values(
                        spec_id=spec_id, state=s.JOB_LEASED, input_file_ids=json.dumps(ids),
                        owner=owner, fence=1, input_segments=self._live_segments(conn, ids),
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
                    held = self._held_elsewhere(conn, rows, job_id, now)
                    if held is not None:
                        raise JobConflictError(f"cannot take over {spec_id}: {held}")
                    gone = _not_live(rows, ids)
                    if gone is None and (self._live_segments(conn, ids)
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

    @staticmethod
    def _lock_files(conn: sa.Connection, ids: Sequence[int]) -> list[sa.Row[Any]]:
        """The file rows, locked in id order (PostgreSQL; SQLite holds the write lock)."""
        if not ids:
            return []
        f = s.files.c
        return list(conn.execute(
            sa.select(s.files).where(f.id.in_(ids)).order_by(f.id).with_for_update()).all())

    @staticmethod
    def _live_segments(conn: sa.Connection, ids: Sequence[int]) -> int:
        """How many live segments these files hold."""
        if not ids:
            return 0
        sg = s.segments.c
        return int(conn.execute(
            sa.select(sa.func.count()).select_from(s.segments)
            .where(sg.file_id.in_(ids), s.LIVE)).scalar_one())

    def _held_elsewhere(self, conn: sa.Connection, rows: Sequence[sa.Row[Any]],
                        own_job: int | None, now: int) -> str | None:
        """Why one of these files is held by another leased, unexpired job, or None."""
        others = [r for r in rows if r.job_id is not None and r.job_id != own_job]
        held = self._held_jobs(conn, [r.job_id for r in others], now)
        for r in others:
            if r.job_id in held:
                return f"input file {r.id} is held by job {r.job_id}"
        return None

    @staticmethod
    def _held_jobs(conn: sa.Connection, job_ids: Sequence[int], now: int) -> set[int]:
        """Which of these jobs are leased and unexpired."""
        if not job_ids:
            return set()
        j = s.jobs.c
        return {int(r) for r in conn.execute(
            sa.select(j.id).where(j.id.in_(set(job_ids)), j.state == s.JOB_LEASED,
                                  j.lease_expires_ms > now)).scalars()}

    def _check_fence(self, conn: sa.Connection, lease: Lease) -> Any:
        """Lock the job row; StaleLeaseError unless it is leased with this lease's fence."""
        j = s.jobs.c
        row = conn.execute(
            sa.select(s.jobs).where(j.id == lease.job_id).with_for_update()).first()
        if row is None or row.state != s.JOB_LEASED or row.fence != lease.fence:
            state = None if row is None else f"{row.state}, fence {row.fence}"
            raise StaleLeaseError(
                f"job {lease.job_id} fence {lease.fence} is stale (job is {state})")
        return row

    def _job_inputs(self, conn: sa.Connection, lease: Lease) -> list[int]:
        """The job's inputs plus the lease's, read unlocked (a job's inputs never change)."""
        stored = conn.execute(
            sa.select(s.jobs.c.input_file_ids).where(s.jobs.c.id == lease.job_id)).scalar()
        ids = set(lease.input_file_ids)
        if stored is not None:
            ids.update(json.loads(stored))
        return sorted(ids)

    def renew_lease(self, lease: Lease, lease_ms: int) -> Lease:
        """Extend the lease to now + `lease_ms`; StaleLeaseError if the fence moved or the job
        is no longer leased. Works on an expired lease nobody took over.

        Crash before COMMIT: the old expiry stands; after: the new one.
        """
        now = self._clock.now_ms()
        with self._write() as conn:
            self._check_fence(conn, lease)
            conn.execute(s.jobs.update().where(s.jobs.c.id == lease.job_id).values(
                lease_expires_ms=now + lease_ms, updated_at_ms=now))
        return dataclasses.replace(lease, expires_ms=now + lease_ms)

    def release_job(self, lease: Lease, *, state: str = s.JOB_FAILED,
                    result: Mapping[str, Any] | None = None) -> None:
        """End a job without committing (`failed` or `abandoned`) and free the inputs it still
        holds. A no-op if the lease is stale or the job is already over.

        Crash before COMMIT: the job stays leased until its lease expires (then its files
        are free for other jobs); after: ended, files free at once.
        """
        if state not in (s.JOB_FAILED, s.JOB_ABANDONED):
            raise ValueError(f"release state must be failed or abandoned, not {state!r}")
        now = self._clock.now_ms()
        with self._write() as conn:
            self._lock_files(conn, self._job_inputs(conn, lease))
            try:
                self._check_fence(conn, lease)
            except StaleLeaseError:
                return
            conn.execute(s.jobs.update().where(s.jobs.c.id == lease.job_id).values(
                state=state, updated_at_ms=now,
                result=None if result is None else json.dumps(result, default=str)))
            conn.execute(s.files.update().where(s.files.c.job_id == lease.job_id)
                         .values(job_id=None))

    def commit_compaction(self, lease: Lease, *, outputs: Sequence[CompactionOutput],
                          result: Mapping[str, Any] | None = None,
                          checkpoints: Mapping[tuple[str, int], int] | None = None,
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
        `result`, cleaner `checkpoints` advanced (never backwards), files.job_id cleared.

        Crash before COMMIT: nothing changed (outputs stay pending and GC removes them; the
        job stays leased until it expires). After: all of it. A failed COMMIT is resolved by
        reading the job back: committed with this fence → success, else CommitUnknownError
        (keep the output objects: they may be live).
        """
        _validate_outputs(outputs, lease.input_file_ids)
        try:
            return self._commit_compaction_once(lease, outputs, result, checkpoints or {})
        except _OutcomeUnknown as exc:
            try:
                with self._read() as conn:
                    row = conn.execute(
                        sa.select(s.jobs).where(s.jobs.c.id == lease.job_id)).first()
            except sa.exc.DBAPIError as read_exc:
                raise CommitUnknownError(
                    f"commit of job {lease.job_id} failed during COMMIT ({exc.cause}) and its"
                    f" outcome could not be read back: {read_exc}") from read_exc
            if row is not None and row.state == s.JOB_COMMITTED and row.fence == lease.fence:
                return CompactionCommit(lease.job_id, tuple(sorted(lease.input_file_ids)),
                                        tuple(o.file_id for o in outputs))
            raise CommitUnknownError(
                f"commit of job {lease.job_id} failed during COMMIT: {exc.cause}") from exc

    def _commit_compaction_once(self, lease: Lease, outputs: Sequence[CompactionOutput],
                                result: Mapping[str, Any] | None,
                                checkpoints: Mapping[tuple[str, int], int],
                                ) -> CompactionCommit:
        f, sg, t, pc = s.files.c, s.segments.c, s.topics.c, s.partitions.c
        now = self._clock.now_ms()
        conn = self._engine.connect()
        try:
            conn.execution_options(silt_write=True)
            trans = conn.begin()
            try:
                # 1. Lock the inputs, then the job row (the module's lock order).
                inputs = self._job_inputs(conn, lease)
                states = {int(r.id): str(r.state) for r in self._lock_files(conn, inputs)}
                job = self._check_fence(conn, lease)
                # 2. Revalidate the inputs.
                for fid in inputs:
                    if states.get(fid) != s.FILE_LIVE:
                        raise CommitConflictError(
                            f"input file {fid} is {states.get(fid)}, no longer live")
                stored = sorted(json.loads(job.input_file_ids))
                if self._live_segments(conn, stored) != job.input_segments:
                    raise CommitConflictError(
                        f"segments of job {lease.job_id}'s inputs are no longer live")
                # 3. Resolve partitions and refuse overlaps with live non-input segments.
                wanted = sorted({(x.topic, x.partition) for o in outputs for x in o.segments}
                                | set(checkpoints))
                names = sorted({name for name, _ in wanted})
                ids = {r.name: int(r.id) for r in conn.execute(
                    sa.select(t.id, t.name).where(t.name.in_(names)))}
                next_offset = {(int(r.topic_id), int(r.partition)): int(r.next_offset)
                               for r in conn.execute(
                    sa.select(pc.topic_id, pc.partition, pc.next_offset).where(
                        pc.topic_id.in_(sorted(set(ids.values())))))}
                for name, part in wanted:
                    if name not in ids:
                        raise UnknownTopicError(f"unknown topic {name!r}")
                    if (ids[name], part) not in next_offset:
                        raise UnknownPartitionError(f"topic {name!r} has no partition {part}")
                rows = []
                for o in outputs:
                    for x in o.segments:
                        tid = ids[x.topic]
                        if x.last_offset >= next_offset[(tid, x.partition)]:
                            raise InvalidCommitError(
                                f"output {x.topic}/{x.partition} ends at {x.last_offset},"
                                f" past the log end {next_offset[(tid, x.partition)]}")
                        # The first live non-input segment ending at or after base_offset is
                        # the only candidate (live segments are ordered and disjoint).
                        nxt = conn.execute(
                            sa.select(sg.id, sg.base_offset).where(
                                sg.topic_id == tid, sg.partition == x.partition, s.LIVE,
                                sg.last_offset >= x.base_offset, sg.file_id.not_in(inputs))
                            .order_by(sg.last_offset).limit(1)).first()
                        if nxt is not None and nxt.base_offset <= x.last_offset:
                            raise CommitConflictError(
                                f"output {x.topic}/{x.partition} [{x.base_offset}, "
                                f"{x.last_offset}] overlaps live segment {nxt.id}")
                        rows.append({
                            "file_id": o.file_id, "topic_id": tid, "partition": x.partition,
                            "base_offset": x.base_offset, "last_offset": x.last_offset,
                            "record_count": x.record_count, "data_pos": x.data_pos,
                            "data_len": x.data_len, "hash_pos": x.hash_pos,
                            "hash_count": x.hash_count, "batch_count": x.batch_count,
                            "min_timestamp": x.min_timestamp, "max_timestamp": x.max_timestamp,
                            "tombstone_count": x.tombstone_count, "frame_crc": x.frame_crc,
                            "live": True, "created_at_ms": now,
                            "cleaned_at_ms": x.cleaned_at_ms,
                        })
                # 4. Swap: inputs' segments out, outputs live with their segments in.
                if inputs:
                    conn.execute(s.segments.update().where(sg.file_id.in_(inputs), s.LIVE)
                                 .values(live=False))
                for o in outputs:
                    flipped = conn.execute(
                        s.files.update().where(f.id == o.file_id, f.state == s.FILE_PENDING)
                        .values(state=s.FILE_LIVE, state_changed_at_ms=now, size=o.size,
                                data_offset=o.data_offset, data_length=o.data_length,
                                meta_offset=o.meta_offset, meta_length=o.meta_length)).rowcount
                    if flipped != 1:
                        raise CommitConflictError(f"output file {o.file_id} is not pending")
                if rows:
                    conn.execute(s.segments.insert(), rows)
                # 5. Retire the inputs (GC'd after the grace period), free what the job held.
                if inputs:
                    conn.execute(s.files.update().where(f.id.in_(inputs)).values(
                        state=s.FILE_RETIRED, state_changed_at_ms=now, job_id=None))
                conn.execute(s.files.update().where(f.job_id == lease.job_id)
                             .values(job_id=None))
                # 6. Advance cleaner checkpoints (never backwards, never past the log end).
                for (topic, part), offset in sorted(checkpoints.items()):
                    conn.execute(s.partitions.update().where(
                        pc.topic_id == ids[topic], pc.partition == part,
                        pc.clean_offset < offset,
                    ).values(clean_offset=sa.func.least(offset, pc.next_offset)
                             if self._pg else sa.func.min(offset, pc.next_offset)))
                conn.execute(s.jobs.update().where(s.jobs.c.id == lease.job_id).values(
                    state=s.JOB_COMMITTED, updated_at_ms=now,
                    result=None if result is None else json.dumps(result, default=str)))
            except MetadataError:
                trans.rollback()
                raise
            except sa.exc.DBAPIError as exc:
                _rollback_quietly(trans)
                raise CommitConflictError(f"compaction commit not applied: {exc}") from exc
            # 7. COMMIT: a failure here leaves the outcome unknown until read back.
            try:
                trans.commit()
            except sa.exc.DBAPIError as exc:
                raise _OutcomeUnknown(exc) from exc
        finally:
            _close_quietly(conn)
        return CompactionCommit(lease.job_id, tuple(inputs), tuple(o.file_id for o in outputs))

    def get_job(self, job_id: int) -> JobInfo:
        """One job row; MetadataError if there is none."""
        with self._read() as conn:
            row = conn.execute(sa.select(s.jobs).where(s.jobs.c.id == job_id)).first()
        if row is None:
            raise MetadataError(f"no job with id {job_id}")
        return _job_info(row)

    def list_jobs(self, state: str | None = None) -> list[JobInfo]:
        """Jobs, oldest first, optionally only those in `state`."""
        q = sa.select(s.jobs).order_by(s.jobs.c.id)
        if state is not None:
            q = q.where(s.jobs.c.state == state)
        with self._read() as conn:
            return [_job_info(r) for r in conn.execute(q).all()]


class _NotApplied(Exception):
    """Internal: the transaction failed before COMMIT and was rolled back."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _OutcomeUnknown(Exception):
    """Internal: COMMIT was sent but its result was lost."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _rollback_quietly(trans: sa.RootTransaction) -> None:
    try:
        trans.rollback()
    except sa.exc.DBAPIError:  # connection already broken: the server rolls back itself
        log.debug("rollback failed", exc_info=True)


def _close_quietly(conn: sa.Connection) -> None:
    try:
        conn.close()
    except sa.exc.DBAPIError:
        log.debug("close failed", exc_info=True)
