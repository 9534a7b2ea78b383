"""The metadata database: engine and SQLite pragmas, schema migrations, read and write
transactions, and THE commit helper every multi-step commit goes through.

Concurrency model. Every write is one transaction. On SQLite writes start with
`BEGIN IMMEDIATE`, so concurrent writers (threads or processes) queue on the database write
lock (busy timeout 30 s) instead of failing with "database is locked" on a lock upgrade; WAL
lets readers run alongside. On PostgreSQL (READ COMMITTED) writers lock rows with
`SELECT … FOR UPDATE` in a fixed order per concern (see files.py and jobs.py), so they
serialize where they overlap and cannot deadlock.
"""

from __future__ import annotations

import json
import logging
import os
import select
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy import event

import telemetry
from clock import SYSTEM_CLOCK, Clock

from . import schema as s
from .errors import (
    CommitConflictError,
    CommitUnknownError,
    MetadataError,
    MetadataNotFoundError,
    MetadataUnavailableError,
    SchemaVersionError,
    UnsupportedMetadataUrlError,
)

if TYPE_CHECKING:  # config.py imports this module (DEFAULT_URL, engine_url)
    from .config import MetadataConfig
    from .models import SegmentInfo

log = logging.getLogger(__name__)

DEFAULT_URL = "sqlite:///./silt-data/metadata.db"
SQLITE_BUSY_TIMEOUT_S = 30.0
# pg_advisory_xact_lock key serializing schema migrations across processes ("silt").
MIGRATION_LOCK_KEY = 0x73696C74
COMMIT_ATTEMPTS = 3

T = TypeVar("T")


def engine_url(url: str) -> str:
    """Map user-facing URLs to SQLAlchemy ones (`postgresql://` → `postgresql+psycopg://`)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    if url.startswith(("postgresql+psycopg://", "sqlite:///")):
        return url
    raise UnsupportedMetadataUrlError(
        f"unsupported metadata URL {url!r}: use sqlite:///path/to/file.db or postgresql://..."
    )


def shown_url(url: str) -> str:
    """`url` as messages show it: its password (if any) as ***."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


DEFAULT_POOL_SIZE = 15  # the metadata.pool.size setting's default (config.py)


def make_engine(url: str, *, create: bool = False,
                pool_size: int = DEFAULT_POOL_SIZE) -> sa.Engine:
    """An engine for `url` with a fixed pool of up to `pool_size` connections (kept once
    opened: none opened and closed per burst); SQLite: WAL, foreign keys, busy timeout, and
    BEGIN IMMEDIATE for write transactions (`silt_write` execution option). An SQLite file
    that does not exist is MetadataNotFoundError unless `create` (then it and its
    directories are created)."""
    target = engine_url(url)
    pool = {"pool_size": pool_size, "max_overflow": 0}
    if target.startswith("postgresql"):
        engine = sa.create_engine(target, **pool)
        _ping_when_told(engine)
        _count_round_trips(engine, driver_begins=True)
        return engine
    path = sa.make_url(target).database
    if not path or path == ":memory:" or path.startswith("file:"):
        raise UnsupportedMetadataUrlError(
            f"metadata URL {url!r} must name a database file (in-memory SQLite is per connection)"
        )
    if not create and not os.path.exists(path):
        raise MetadataNotFoundError(
            f"no metadata database {path} ({url}): `silt init` creates one, and so does"
            " the first write command (topics create, produce, agent, up)")
    if create:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    engine = sa.create_engine(target, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}, **pool)

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
        options = conn.get_execution_options()
        if options.get(SINGLE, False):
            return  # `Database.single`: the statement is its own transaction
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get("silt_write", False) else "BEGIN")

    _count_round_trips(engine, driver_begins=False)
    return engine


SINGLE = "silt_single"
"""The execution option of a `Database.single` connection: no transaction around its one
statement (PostgreSQL: autocommit; SQLite: no BEGIN)."""


def _ping_when_told(engine: sa.Engine) -> None:
    """SQLAlchemy's pool_pre_ping (a `SELECT 1` round trip at each checkout, so a connection
    the server closed is replaced before use), only for a connection whose socket has
    something to read while idle: a server that ends a session (a restart, an
    administrator's pg_terminate_backend, an idle timeout) first sends it an error, or at
    least closes it, and either makes the socket readable. A zero-timeout poll costs a
    system call, not a round trip (a metadata read costs one statement, not two). Missed,
    as by a pre-ping: a connection cut silently; its next statement fails and SQLAlchemy
    then replaces every pooled connection."""

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        try:
            told = dbapi_conn.closed or bool(select.select([dbapi_conn.fileno()], [], [], 0)[0])
        except (OSError, ValueError, engine.dialect.loaded_dbapi.Error):
            told = True  # no socket to look at: ask the server
        if not told:
            return
        telemetry.metadata_round_trip("ping")
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:  # the pool replaces it and retries
            raise sa.exc.DisconnectionError(f"metadata connection lost: {exc}") from exc


def _count_round_trips(engine: sa.Engine, *, driver_begins: bool) -> None:
    """Count each round trip to the database (`telemetry.metadata_round_trip`): every
    statement, and a transaction's BEGIN, COMMIT and ROLLBACK — sent by the driver itself
    on PostgreSQL (`driver_begins`: psycopg's BEGIN before a transaction's first
    statement), as statements of ours on SQLite (`BEGIN`, counted as a begin) — except
    around a `Database.single` statement, which has none."""

    @event.listens_for(engine, "before_cursor_execute")
    def _statement(_conn: sa.Connection, _cursor: Any, statement: str, *_: Any) -> None:
        telemetry.metadata_round_trip("begin" if statement.startswith("BEGIN") else "statement")

    def transaction(kind: str) -> Callable[[sa.Connection], None]:
        def count(conn: sa.Connection) -> None:
            if not conn.get_execution_options().get(SINGLE, False):
                telemetry.metadata_round_trip(kind)
        return count

    if driver_begins:
        event.listen(engine, "begin", transaction("begin"))
    event.listen(engine, "commit", transaction("commit"))
    event.listen(engine, "rollback", transaction("rollback"))


@dataclass(frozen=True, slots=True)
class Unknown:
    """A commit's read-back could not tell whether it was applied, and why."""

    why: str


# What a commit's read-back finds after a failed COMMIT: the commit's result (applied),
# None (definitely not applied: retried) or Unknown.
ReadBack = Callable[[sa.Connection], "T | Unknown | None"]


@dataclass(frozen=True, slots=True)
class KeyRows:
    """Many key tuples as a table to join in one statement (`key_rows`), not an IN list:
    `source` goes after FROM/JOIN, `cols[i]` is the i-th key column, `params` its driver
    parameters."""

    source: str
    cols: tuple[str, ...]
    params: tuple[Any, ...]


def pg_arrays(columns: Iterable[Sequence[Any]], types: Sequence[str]) -> tuple[Any, ...]:
    """Columns as psycopg parameters for `%s::<type>[]` placeholders, one per column:
    numbers and booleans (or NULLs) as ONE array literal ('{1,2,NULL}'), text as a list
    (psycopg quotes each element). psycopg's list dumper checks every element with a
    regex, ~0.5 µs each: ~11 ms of agent CPU in a 1,000-partition flush's commit; the
    literal costs a fifth of that. Values are ints or bools (typed), never SQL."""
    return tuple(list(col) if kind == "text" else _array_literal(col)
                 for col, kind in zip(columns, types, strict=True))


def _array_literal(values: Sequence[Any]) -> str:
    if None in values:
        return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"
    return "{" + ",".join(map(str, values)) + "}"


def key_rows(pg: bool, keys: Sequence[Sequence[Any]], types: Sequence[str]) -> KeyRows:
    """`keys` (tuples of len(types) values) as a derived table: PostgreSQL's unnest of one
    typed array per column (`types`: bigint, integer, text, ...), SQLite's json_each of one
    JSON text. One statement and a fixed parameter count, however many keys."""
    if pg:
        names = [f"k{i}" for i in range(len(types))]
        arrays = ", ".join(f"%s::{t}[]" for t in types)
        return KeyRows(f"unnest({arrays}) AS v({', '.join(names)})",
                       tuple(f"v.{n}" for n in names),
                       pg_arrays(zip(*keys, strict=True), types))
    return KeyRows("json_each(?) AS v",
                   tuple(f"json_extract(v.value, '$[{i}]')" for i in range(len(types))),
                   (json.dumps([list(k) for k in keys]),))


class Database:
    """One metadata database: engine, clock and transactions. Thread-safe: each call checks
    out its own connection."""

    def __init__(self, engine: sa.Engine, url: str, clock: Clock,
                 config: MetadataConfig) -> None:
        self.engine = engine
        self.clock = clock
        self.config = config  # the timeouts the concern modules apply
        self.pg = engine.dialect.name == "postgresql"
        self._url = url
        self._secret: bytes | None = None
        # reads.snapshot's memory: each live file's live segments by file id, with the
        # file's segments_version they were read at (replaced whole by each snapshot).
        self.segment_cache: dict[int, tuple[int, tuple[SegmentInfo, ...]]] = {}

    @classmethod
    def open(cls, url: str = DEFAULT_URL, *, create: bool = False, clock: Clock = SYSTEM_CLOCK,
             config: MetadataConfig | None = None) -> Self:
        """Connect, then migrate the schema (idempotent; concurrent opens are safe).

        Nothing is created unless `create`: without it a missing SQLite file (or its
        directory) or a database without the schema is MetadataNotFoundError, so a
        mistyped URL never leaves an empty database behind. The PostgreSQL database itself
        is never created. A database that cannot be reached or read (server down, no such
        database, a file that is not SQLite) is MetadataUnavailableError, one line.

        `config` gives the timeouts (producer-state expiry, agent sessions) and the pool's
        size (its URL is not used: `url` is); default: the section's defaults.

        Each migration runs in its own transaction that re-reads the version under a lock
        (PostgreSQL advisory lock / SQLite write lock), so two processes opening a fresh
        database apply each migration exactly once. A crash mid-migration rolls it back.
        """
        if config is None:
            from .config import MetadataConfig
            config = MetadataConfig()
        db = cls(make_engine(url, create=create, pool_size=config.pool_size), url, clock,
                 config)
        try:
            db._migrate(create)
        except sa.exc.DBAPIError as exc:
            db.close()
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
            raise MetadataUnavailableError(
                f"cannot open metadata {shown_url(url)}: {reason}") from exc
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        """Release all connections."""
        self.engine.dispose()

    def __enter__(self) -> Self:
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
        return self.engine.dialect.name

    def schema_version(self) -> int:
        """The applied schema version."""
        with self.read() as conn:
            return self._version(conn)

    @staticmethod
    def _version(conn: sa.Connection) -> int:
        if not sa.inspect(conn).has_table(s.schema_version.name):
            return 0
        v = conn.execute(sa.select(sa.func.max(s.schema_version.c.version))).scalar()
        return int(v or 0)

    def _migrate(self, create: bool) -> None:
        while True:
            with self.write() as conn:
                if self.pg:
                    conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
                version = self._version(conn)
                if version == 0 and not create:
                    raise MetadataNotFoundError(
                        f"no siltstream metadata in {shown_url(self._url)}: `silt init`"
                        " creates it, and so does the first write command (topics create,"
                        " produce, agent, up)")
                s.md.create_all(conn, tables=[s.schema_version])
                if version > s.LATEST_VERSION:
                    raise SchemaVersionError(
                        f"metadata schema version {version} is newer than this code"
                        f" (knows up to {s.LATEST_VERSION}); upgrade siltstream"
                    )
                if version == s.LATEST_VERSION:
                    return
                now = self.clock.now_ms()
                s.MIGRATIONS[version](conn, now)
                conn.execute(s.schema_version.insert().values(
                    version=version + 1, applied_at_ms=now))
                log.info("metadata schema migrated to version %d", version + 1)

    @contextmanager
    def read(self, *, consistent: bool = False) -> Iterator[sa.Connection]:
        """A read transaction (SQLite: deferred, a consistent snapshot once it reads);
        `consistent`: every statement sees the same snapshot on PostgreSQL too (REPEATABLE
        READ instead of READ COMMITTED), for reads that relate several tables' rows."""
        with self.engine.connect() as conn:
            if consistent and self.pg:
                conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    @contextmanager
    def single(self) -> Iterator[sa.Connection]:
        """A connection for ONE statement outside any transaction: the statement is its own
        (one consistent snapshot) and costs no BEGIN and COMMIT round trips (the fetch
        path's `reads.partitions_from`)."""
        with self.engine.connect() as conn:
            conn.execution_options(**{SINGLE: True},
                                   **({"isolation_level": "AUTOCOMMIT"} if self.pg else {}))
            yield conn

    @contextmanager
    def write(self) -> Iterator[sa.Connection]:
        """A write transaction (SQLite: BEGIN IMMEDIATE, i.e. the database write lock)."""
        with self.engine.connect() as conn:
            conn.execution_options(silt_write=True)
            with conn.begin():
                yield conn

    def cluster_secret(self) -> bytes:
        """The cluster's 32 random bytes, created with the schema (key for BLAKE2b key hashes)."""
        if self._secret is None:
            with self.read() as conn:
                secret = conn.execute(
                    sa.select(s.cluster.c.secret).where(s.cluster.c.id == 1)
                ).scalar_one()
            self._secret = bytes(secret)
        return self._secret

    def commit(self, what: str, body: Callable[[sa.Connection], T],
               read_back: ReadBack[T], *, kind: str = "other") -> T:
        """Run `body` in a write transaction and COMMIT it, with a definite outcome where
        one can be had. The one retry rule of every commit (agent files, compaction jobs):

        - `body` raises a MetadataError (validation, conflict, stale lease): rolled back,
          raised as is — nothing was applied and trying again would see the same state;
        - a database error before COMMIT (lock timeout, deadlock, lost connection, a
          serialization failure): rolled back, so nothing was applied; retried, up to
          COMMIT_ATTEMPTS attempts in all, then CommitConflictError (retriable);
        - a database error during COMMIT: the outcome is read back in a new transaction
          by `read_back` through the commit's stable identity (its file ids, its job and
          fence): applied → its result; definitely not applied → retried as above;
          `Unknown`, or the read-back itself failing → CommitUnknownError (do not delete
          the objects: they may be live).

        The paths differ only in what they read back: an agent file is pending (not
        applied) or live (applied), and a compaction job committed with its fence
        (applied) — anything else about a job is reported Unknown, never not-applied.

        Its duration and outcome go to `telemetry` under `kind` (files, compaction, topics,
        records): metadata commit latency.
        """
        started = time.perf_counter()
        outcome = "error"
        try:
            result = self._commit(what, body, read_back)
            outcome = "ok"
            return result
        except CommitConflictError:
            outcome = "conflict"
            raise
        except CommitUnknownError:
            outcome = "unknown"
            raise
        except MetadataError:
            outcome = "refused"
            raise
        finally:
            telemetry.commit_done(kind, outcome, time.perf_counter() - started)

    def _commit(self, what: str, body: Callable[[sa.Connection], T],
                read_back: ReadBack[T]) -> T:
        last: Exception | None = None
        for attempt in range(COMMIT_ATTEMPTS):
            if attempt:
                time.sleep(0.05 * attempt)
            conn = self.engine.connect()
            try:
                conn.execution_options(silt_write=True)
                trans = conn.begin()
                try:
                    result = body(conn)
                except MetadataError:
                    trans.rollback()
                    raise
                except sa.exc.DBAPIError as exc:
                    _rollback_quietly(trans)
                    last = exc
                    log.warning("%s not applied (attempt %d): %s", what, attempt + 1, exc)
                    continue
                try:
                    trans.commit()
                except sa.exc.DBAPIError as exc:
                    outcome = self._read_back(what, exc, read_back)
                    if outcome is None:
                        last = exc
                        continue
                    return outcome
                return result
            finally:
                _close_quietly(conn)
        raise CommitConflictError(
            f"{what} not applied after {COMMIT_ATTEMPTS} attempts: {last}") from last

    def _read_back(self, what: str, cause: Exception, read_back: ReadBack[T]) -> T | None:
        """After a failed COMMIT: the result if applied, None if not, else CommitUnknownError."""
        try:
            with self.read() as conn:
                outcome = read_back(conn)
        except sa.exc.DBAPIError as exc:
            raise CommitUnknownError(
                f"{what} failed during COMMIT ({cause}) and its outcome could not be read"
                f" back: {exc}") from exc
        if isinstance(outcome, Unknown):
            raise CommitUnknownError(f"{what} failed during COMMIT ({cause}); {outcome.why}")
        return outcome


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
