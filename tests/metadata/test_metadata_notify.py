"""Commit notifications across processes (metadata/notify.py): a watcher hears data
commits made through another handle (another agent process, as far as it can tell), and a
PostgreSQL watcher whose LISTEN connection dies reconnects and wakes at once."""

from __future__ import annotations

import threading

import sqlalchemy as sa

from clock import ManualClock
from metadata import MetadataStore

from .metadata_helpers import chunk, commit

WAIT_S = 30.0  # far above the expected milliseconds: reaching it means a missed wake-up


class Calls:
    """Counts a watcher's callbacks; `wait_more` waits for one after a mark."""

    def __init__(self) -> None:
        self.n = 0
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self.n += 1
            self._cond.notify_all()

    def wait_more(self, than: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.n > than, WAIT_S)


def test_watcher_hears_a_commit_through_another_handle(metadata_url: str,
                                                       clock: ManualClock) -> None:
    writer = MetadataStore.open(metadata_url, clock=clock, create=True)
    watching = MetadataStore.open(metadata_url, clock=clock, create=True)
    writer.create_topic("t", 2)
    calls = Calls()
    try:
        with watching.watch_commits(calls):
            assert calls.wait_more(0)  # the wake-up of a (re)connect: nothing heard before
            for i in range(3):  # each commit is heard, not just the first
                mark = calls.n
                commit(writer, f"k{i}", [chunk("t", i % 2, span=2)])
                assert calls.wait_more(mark), f"commit {i} not heard"
    finally:
        writer.close()
        watching.close()


def test_retention_moving_the_log_start_is_heard(metadata_url: str, clock: ManualClock) -> None:
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    md.create_topic("r", 1, {"retention.ms": "1000"})  # the chunks are from 1970
    commit(md, "old", [chunk("r", 0, span=3)])
    commit(md, "new", [chunk("r", 0, span=3)])
    calls = Calls()
    try:
        with md.watch_commits(calls):
            assert calls.wait_more(0)
            mark = calls.n
            assert md.apply_retention().changes
            assert calls.wait_more(mark)
    finally:
        md.close()


def test_postgres_watcher_reconnects_and_wakes(postgres_url: str, clock: ManualClock) -> None:
    """The LISTEN connection is killed: the watcher reconnects, wakes its waiters (commits
    meanwhile were not heard) and hears the commits after it."""
    md = MetadataStore.open(postgres_url, clock=clock, create=True)
    md.create_topic("t", 1)
    calls = Calls()
    try:
        with md.watch_commits(calls):
            assert calls.wait_more(0)
            mark = calls.n
            with md.engine.connect() as conn:
                killed = conn.execute(sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN%'")).all()
            assert [k for (k,) in killed] == [True]
            assert calls.wait_more(mark)  # reconnected (LISTEN again), and said so
            mark = calls.n
            commit(md, "after", [chunk("t", 0)])
            assert calls.wait_more(mark)
    finally:
        md.close()
