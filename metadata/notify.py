"""Commit notifications across processes: each data commit tells every agent process's
watcher, which wakes the long-polling fetches that agent serves.

ACL changes (acls.py) announce on their own channel, ACL_CHANNEL, heard by the same
watcher, whose `on_acls` callback makes the agent re-read the ACL version (and the bindings
only if it moved); on SQLite every commit calls both callbacks.

What announces: agent file commits (files.py: new records, a higher high watermark) and
retention (retention.py: the log start moved, so a waiting fetch may now be out of range).
Compaction does not: it never adds records or moves the log start, so no waiting fetch's
answer changes. Notifications are coarse ("some data changed"): every waiter re-reads.

Never missed: a waiter takes its wake-up event BEFORE reading (agent/protocol/context.py)
and a notification only ever arrives after its COMMIT, so it sets the event of every
waiter whose read could have missed that commit.

PostgreSQL: `NOTIFY silt_data` inside the committing transaction, delivered when (and only
if) it commits. A watcher holds one autocommit connection LISTENing on its own thread; a
lost connection is re-opened with backoff and then reports a wake-up at once, for the
commits it may have missed meanwhile. Latency: the server's delivery (well under a
millisecond locally) plus a thread hop. Cost: NOTIFY serializes committing transactions on
one lock at COMMIT, noise at an agent's few commits a second.

SQLite (embedded, usually one process; others may share the file): no NOTIFY. The watcher
polls `PRAGMA data_version` on its own connection every DATA_VERSION_POLL_S (25 ms). The
value changes whenever another connection commits (WAL included) and reading it is a look
at the WAL index in shared memory (no I/O, microseconds), so 40 polls a second cost well
under 1% of a core. Latency: at most 25 ms. It changes on every commit, not only data
commits (agent heartbeats too): a woken fetch re-reads once and waits again. Rejected: the
file's mtime (WAL commits leave the main file alone until a checkpoint) and any poll loop
per fetch (one watcher per process serves them all).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Self

import psycopg
import sqlalchemy as sa

from .engine import SQLITE_BUSY_TIMEOUT_S, Database

log = logging.getLogger(__name__)

CHANNEL = "silt_data"
ACL_CHANNEL = "silt_acls"
DATA_VERSION_POLL_S = 0.025
# How often the LISTEN thread looks at its stop flag while no notification comes.
LISTEN_STOP_CHECK_S = 0.5
RECONNECT_MIN_S, RECONNECT_MAX_S = 0.1, 5.0
READY_WAIT_S = 30.0


def announce(db: Database, conn: sa.Connection) -> None:
    """Tell every watcher that this transaction changes partitions' data, once it commits
    (PostgreSQL; on SQLite watchers see every commit without being told)."""
    if db.pg:
        conn.exec_driver_sql(f"NOTIFY {CHANNEL}")


def announce_acls(db: Database, conn: sa.Connection) -> None:
    """Tell every watcher that this transaction changes ACLs, once it commits."""
    if db.pg:
        conn.exec_driver_sql(f"NOTIFY {ACL_CHANNEL}")


class CommitWatcher:
    """One thread per process calling `on_commit` after data commits of any process, and
    `on_acls` after ACL changes (sometimes more often; never fewer). `start`, then `close`."""

    def __init__(self, db: Database, on_commit: Callable[[], None],
                 on_acls: Callable[[], None] | None = None) -> None:
        self._on_commit = on_commit
        self._on_acls = on_acls
        self._pg = db.pg
        url = db.engine.url
        # PostgreSQL: a plain libpq DSN for psycopg; SQLite: the database file.
        self._target = (url.set(drivername="postgresql").render_as_string(hide_password=False)
                        if db.pg else str(url.database))
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._hearing = False
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        """Start watching; returns once the first LISTEN (or first data_version read) is
        in place or its first attempt failed (then it keeps retrying in the background)."""
        run = self._listen if self._pg else self._poll
        self._thread = threading.Thread(target=run, name="silt-commit-watcher", daemon=True)
        self._thread.start()
        self._ready.wait(READY_WAIT_S)
        return self

    def hearing(self) -> bool:
        """Whether every commit from now on will be heard (the LISTEN connection is open, or
        the last data_version poll worked): a cache kept exact by the notifications is
        trusted only meanwhile (agent/protocol/states.py). Becoming deaf is seen when the
        connection fails, and is a wake-up (so what was kept goes); hearing again is
        followed by one."""
        return self._hearing

    def close(self) -> None:
        """Stop the thread (within LISTEN_STOP_CHECK_S). Idempotent."""
        self._stop.set()
        self._hearing = False
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wake(self, data: bool = True, acls: bool = True) -> None:
        for wanted, callback in ((data, self._on_commit), (acls, self._on_acls)):
            if not wanted or callback is None:
                continue
            try:
                callback()
            except Exception:  # the callback's failure must not stop the watcher
                log.exception("commit watcher callback failed")

    def _deaf(self) -> None:
        """The watcher stopped hearing: a wake-up once, so what was kept goes."""
        if self._hearing:
            self._hearing = False
            self._wake(acls=False)

    def _listen(self) -> None:
        delay = RECONNECT_MIN_S
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._target, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if self._on_acls is not None:
                        conn.execute(f"LISTEN {ACL_CHANNEL}")
                    self._hearing = True
                    self._ready.set()
                    self._wake()  # commits while (re)connecting were not heard
                    delay = RECONNECT_MIN_S
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=LISTEN_STOP_CHECK_S):
                            acls = note.channel == ACL_CHANNEL
                            self._wake(data=not acls, acls=acls)
                            if self._stop.is_set():
                                break
            except psycopg.Error as exc:
                self._deaf()
                self._ready.set()
                log.warning("commit watcher: LISTEN connection failed (%s); retrying in"
                            " %.1f s", exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)

    def _poll(self) -> None:
        conn: sqlite3.Connection | None = None
        last: int | None = None
        try:
            while True:
                try:
                    if conn is None:
                        conn = sqlite3.connect(self._target, timeout=SQLITE_BUSY_TIMEOUT_S,
                                               isolation_level=None, check_same_thread=False)
                    version = int(conn.execute("PRAGMA data_version").fetchone()[0])
                    self._hearing = True
                    if version != last:  # or a new connection: commits before it unheard
                        self._wake()
                    last = version
                except sqlite3.Error as exc:
                    self._deaf()
                    log.warning("commit watcher: PRAGMA data_version failed: %s", exc)
                    if conn is not None:
                        conn.close()
                    conn = last = None  # a new connection's versions start afresh
                self._ready.set()
                if self._stop.wait(DATA_VERSION_POLL_S):
                    return
        finally:
            if conn is not None:
                conn.close()


def watch_commits(db: Database, on_commit: Callable[[], None],
                  on_acls: Callable[[], None] | None = None) -> CommitWatcher:
    """A started `CommitWatcher` calling `on_commit` (from its thread) after data commits
    of any process on this database, and `on_acls` after ACL changes. Close it when done."""
    return CommitWatcher(db, on_commit, on_acls).start()
