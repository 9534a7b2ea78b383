"""Many compactors at once: one commit per input set, fencing of stale leases, commits
racing conflicting commits; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from compactor import Compactor, CompactorConfig, JobReport
from metadata import MetadataStore
from metadata import schema as s
from metadata.engine import engine_url
from metadata.errors import StaleLeaseError
from planner.model import JobSpec, PartitionPlan, Trigger
from tests.compactor.support import Harness, Rec, assert_preserved, latest_per_key


@pytest.fixture
def h(metadata_url: str) -> Iterator[Harness]:
    harness = Harness.open(metadata_url)
    yield harness
    harness.close()


def state_of(md: MetadataStore) -> Any:
    """Everything a refused commit must leave unchanged."""
    snap = md.snapshot()
    return (sorted((f.id, f.state, f.level) for f in snap.files),
            sorted((x.topic, x.partition, x.base_offset, x.last_offset, x.file_id)
                   for x in snap.segments),
            sorted((p.topic, p.partition, p.next_offset, p.clean_offset) for p in snap.partitions))


def by_offset(recs: dict[bytes | None, Rec]) -> list[Rec]:
    return sorted(recs.values(), key=lambda r: r.offset)


def assert_fully_compacted(h: Harness, topic: str, partitions: int) -> None:
    for p in range(partitions):
        got = h.read(topic, p)
        assert_preserved(got, h.produced[(topic, p)])
        assert got == by_offset(latest_per_key(h.produced[(topic, p)]))


class PausedCommits:
    """A MetadataStore proxy whose commit_compaction waits until `go` is set."""

    def __init__(self, inner: MetadataStore) -> None:
        self._inner = inner
        self.reached = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit_compaction(self, *args: Any, **kwargs: Any) -> Any:
        self.reached.set()
        assert self.go.wait(30)
        return self._inner.commit_compaction(*args, **kwargs)


def run_in_thread(fn: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn(*args)))
    t.start()
    return t, out


# ------------------------------------------------------------------ many workers


def test_concurrent_workers_commit_each_input_set_once(h: Harness, metadata_url: str) -> None:
    h.md.create_topic("c", 3, {"cleanup.policy": "compact"})
    h.md.create_topic("d", 1)
    workers = 4
    for contest in range(2):
        for rnd in range(3):
            h.produce([("c", i % 3, b"k%d" % (i % 7), b"%d-%d-%d" % (contest, rnd, i), ())
                       for i in range(30)] + [("d", 0, None, b"%d" % rnd, ())])
        inputs = sorted(f.id for f in h.md.snapshot().files)
        barrier = threading.Barrier(workers)
        reports: list[JobReport] = []
        lock = threading.Lock()

        def worker(barrier: threading.Barrier = barrier, lock: threading.Lock = lock,
                   reports: list[JobReport] = reports) -> None:
            own = MetadataStore.open(metadata_url, clock=h.clock, create=True)
            try:
                comp = Compactor(h.store, own, clock=h.clock)
                barrier.wait()
                got = comp.run_once(everything=True)
                with lock:
                    reports.extend(got)
            finally:
                own.close()

        threads = [threading.Thread(target=worker) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outcomes = sorted(r.outcome for r in reports)
        assert outcomes.count("committed") == 1, [r.error for r in reports]
        assert all(o in ("committed", "skipped") for o in outcomes), [r.error for r in reports]
        jobs = [j for j in h.md.list_jobs() if tuple(sorted(j.input_file_ids)) == tuple(inputs)]
        assert [j.state for j in jobs] == ["committed"]  # one job row, committed once
        files = {f.id: f.state for f in (h.md.get_file(i) for i in inputs)}
        assert set(files.values()) == {"retired"}
        assert_fully_compacted(h, "c", 3)
        assert h.read("d", 0) == h.produced[("d", 0)]


# ------------------------------------------------------------------ stale leases


def test_stale_lease_is_fenced_at_the_metadata_level(h: Harness) -> None:
    h.md.create_topic("c", 1, {"cleanup.policy": "compact"})
    h.produce_kv("c", [(b"a", b"1"), (b"a", b"2")])
    spec = h.compactor().plan(everything=True).jobs[0]
    old = h.md.lease_job(spec.spec_id, spec.input_file_ids, owner="zombie", lease_ms=1000)
    h.clock.advance(1001)
    new = h.md.lease_job(spec.spec_id, spec.input_file_ids, owner="w2", lease_ms=1000)
    assert (new.job_id, new.fence) == (old.job_id, old.fence + 1)
    before = state_of(h.md)
    with pytest.raises(StaleLeaseError):
        h.md.commit_compaction(old, outputs=[])
    with pytest.raises(StaleLeaseError):
        h.md.renew_lease(old, 1000)
    h.md.release_job(old)  # a no-op for a stale holder
    assert state_of(h.md) == before
    assert h.md.get_job(old.job_id).owner == "w2"
    assert h.md.get_job(old.job_id).state == "leased"
    assert h.kv("c", 0) == [(0, b"a", b"1"), (1, b"a", b"2")]


def test_expired_worker_loses_to_the_one_that_took_its_job_over(h: Harness) -> None:
    h.md.create_topic("c", 2, {"cleanup.policy": "compact"})
    for rnd in range(2):
        h.produce([("c", i % 2, b"k%d" % (i % 3), b"%d-%d" % (rnd, i), ()) for i in range(12)])
    slow_md = PausedCommits(h.md)
    slow = Compactor(h.store, slow_md, CompactorConfig(lease_ms=1000),  # type: ignore[arg-type]
                     clock=h.clock)
    spec = slow.plan(everything=True).jobs[0]
    thread, out = run_in_thread(slow.run_job, spec)
    assert slow_md.reached.wait(30)  # merged and uploaded; about to commit
    h.clock.advance(1001)  # its lease expired
    taker = h.compactor(lease_ms=1000).run_job(spec)
    assert taker.outcome == "committed", taker.error
    after = state_of(h.md)
    keys_after = h.object_keys()
    slow_md.go.set()
    thread.join()
    (zombie,) = out
    assert zombie.outcome == "lost" and "stale" in (zombie.error or "")
    assert (zombie.fence, taker.fence) == (1, 2)
    assert state_of(h.md) == after  # nothing changed, beyond its own outputs
    assert h.object_keys() < keys_after  # the zombie's outputs were deleted
    assert h.object_keys() >= h.live_keys()
    assert [j.state for j in h.md.list_jobs()] == ["committed"]
    assert_fully_compacted(h, "c", 2)


# ------------------------------------------------------------------ conflicting commits


def spec_over(h: Harness, file_ids: tuple[int, ...], name: str) -> JobSpec:
    """A job over some files of a single-partition compacted topic (not the whole log)."""
    return JobSpec(name, tuple(sorted(file_ids)), 1, Trigger.FORCED_ALL, "test", 0,
                   (PartitionPlan("c", 0, False, 2**63 - 1, 86_400_000),))


@pytest.mark.parametrize("first", ["a", "b"])
def test_commit_racing_a_conflicting_commit_is_refused_cleanly(h: Harness, first: str) -> None:
    h.md.create_topic("c", 1, {"cleanup.policy": "compact"})
    for rnd in range(3):
        h.produce_kv("c", [(b"k%d" % i, b"%d-%d" % (rnd, i)) for i in range(4)])
    f1, f2, f3 = sorted(f.id for f in h.md.snapshot().files)
    # Job a holds (f1, f2); its lease expires before it commits; job b takes (f2, f3).
    mds = {"a": PausedCommits(h.md), "b": PausedCommits(h.md)}
    comps = {k: Compactor(h.store, m, CompactorConfig(lease_ms=1000),  # type: ignore[arg-type]
                          clock=h.clock) for k, m in mds.items()}
    specs = {"a": spec_over(h, (f1, f2), "a"), "b": spec_over(h, (f2, f3), "b")}
    ta, out_a = run_in_thread(comps["a"].run_job, specs["a"])
    assert mds["a"].reached.wait(30)
    h.clock.advance(1001)
    tb, out_b = run_in_thread(comps["b"].run_job, specs["b"])
    assert mds["b"].reached.wait(30)
    second = "b" if first == "a" else "a"
    mds[first].go.set()
    (ta if first == "a" else tb).join()
    after = state_of(h.md)
    read_after = h.read("c", 0)
    mds[second].go.set()
    ta.join()
    tb.join()
    reports = {"a": out_a[0], "b": out_b[0]}
    assert reports[first].outcome == "committed", reports[first].error
    assert reports[second].outcome == "lost"
    assert "no longer live" in (reports[second].error or "")
    assert state_of(h.md) == after
    assert h.read("c", 0) == read_after
    states = {j.spec_id: j.state for j in h.md.list_jobs()}
    assert states[first] == "committed" and states[second] == "leased"
    produced = h.produced[("c", 0)]
    assert_preserved(read_after, produced)
    assert set(latest_per_key(produced).values()) <= set(read_after)
    # The loser's outputs are gone; a later full run finishes the work.
    assert h.object_keys() >= h.live_keys()
    h.clock.advance(1001)
    (report,) = h.compactor().run_once(everything=True)
    assert report.outcome == "committed", report.error
    assert_fully_compacted(h, "c", 1)


# ------------------------------------------------------------------ PostgreSQL lock order


def wait_for_lock_waiters(conn: sa.Connection, n: int) -> None:
    for _ in range(300):
        waiting = conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'").scalar()
        if waiting is not None and int(waiting) >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"never saw {n} sessions waiting for a lock")


def test_commit_is_not_a_deadlock_victim_of_a_concurrent_lease(postgres_url: str) -> None:
    """Regression (fixed in 1981471): lease_job locked the input files then the job row,
    commit_compaction the job row then the files; a second worker leasing the same job
    during a commit deadlocked with it and PostgreSQL aborted the commit ('lost')."""
    h = Harness.open(postgres_url)
    # The second worker's session never runs the deadlock check first, so the outcome does
    # not depend on timing: with the bug the committing session finds the cycle.
    other = MetadataStore.open(postgres_url + "?options=-c%20deadlock_timeout%3D20s",
                               clock=h.clock, create=True)
    engine = sa.create_engine(engine_url(postgres_url))
    paused = PausedCommits(h.md)
    try:
        h.md.create_topic("c", 1, {"cleanup.policy": "compact"})
        h.produce_kv("c", [(b"a", b"1")])
        h.produce_kv("c", [(b"a", b"2")])
        comp = Compactor(h.store, paused, clock=h.clock)  # type: ignore[arg-type]
        spec = comp.plan(everything=True).jobs[0]
        thread, out = run_in_thread(comp.run_job, spec)
        assert paused.reached.wait(30)  # worker 1 merged its job and is about to commit
        (job,) = h.md.list_jobs()
        lease_errors: list[BaseException] = []

        def lease() -> None:
            try:
                other.lease_job(spec.spec_id, spec.input_file_ids, owner="w2", lease_ms=60_000)
            except BaseException as exc:
                lease_errors.append(exc)

        with engine.connect() as watcher, engine.connect() as holder:
            # Hold the job row briefly so both sessions line up behind it: the commit first,
            # then the second worker's lease_job (a real one).
            tx = holder.begin()
            holder.execute(sa.select(s.jobs).where(s.jobs.c.id == job.id).with_for_update())
            paused.go.set()
            wait_for_lock_waiters(watcher, 1)
            lessee = threading.Thread(target=lease)
            lessee.start()
            wait_for_lock_waiters(watcher, 2)
            tx.rollback()
            lessee.join()
        thread.join()
        (report,) = out
        assert report.outcome == "committed", report.error
        assert len(lease_errors) == 1
        assert type(lease_errors[0]).__name__ in ("JobLeasedError", "JobConflictError"), (
            lease_errors[0])
        assert h.kv("c", 0) == [(1, b"a", b"2")]
    finally:
        paused.go.set()
        engine.dispose()
        other.close()
        h.close()
