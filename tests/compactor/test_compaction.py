"""Compaction end to end: request counts proven by the server, Kafka LogCleaner scenarios,
property tests against a model, concurrency, crashes."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clock import ManualClock
from compactor import Compactor, CompactorConfig
from compactor.worker import UPLOAD_SWEEP_INTERVAL_MS
from metadata import MetadataStore
from metadata.errors import CommitConflictError, CommitUnknownError, StaleLeaseError
from objectstore import UnfinishedUpload, open_store
from objectstore.testserver import RecordingMotoServer
from tests.compactor.helpers import Env, latest_per_key


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    clock = ManualClock()
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", clock=clock, create=True)
    yield Env(open_store(f"memory://c-{tmp_path.name}"), md, clock)
    md.close()


# ------------------------------------------------------------------ request counts


@pytest.mark.parametrize("partitions", [1, 100, 1000])
def test_two_gets_per_input_file_on_the_server(
    partitions: int, s3_url: str, moto_server: RecordingMotoServer, metadata_url: str
) -> None:
    clock = ManualClock()
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    e = Env(open_store(s3_url), md, clock)
    half = max(1, partitions // 2)
    md.create_topic("state", half, {"cleanup.policy": "compact"})
    if partitions > 1:
        md.create_topic("events", partitions - half)
    for rnd in range(3):  # three input files, each holding every partition
        rows: list[tuple[int, bytes | None, bytes | None]] = [
            (p, b"k%d" % (rnd % 2), b"v%d" % rnd) for p in range(half)]
        e.produce("state", rows)
        if partitions > 1:
            e.produce("events", [(p, None, b"e") for p in range(partitions - half)])
    files = md.stats().as_dict()["levels"][0]["files"]
    moto_server.clear_log()
    (report,) = e.compactor().run_once(everything=True)
    served = moto_server.counts()
    assert report.outcome == "committed"
    assert served["GET"] == 2 * files == 2 * report.input_files
    assert report.requests["GET"] == served["GET"]
    assert report.bytes_read <= 1.05 * report.input_bytes
    # Latest value per key survives; everything else of the state topic is gone.
    assert [v for _, _, v in e.read("state", 0)] == [b"v1", b"v2"]
    md.close()


# ------------------------------------------------------------------ LogCleanerTest ports


def test_clean_keeps_latest_per_key_and_offsets(env: Env) -> None:
    env.md.create_topic("t", 1, {"cleanup.policy": "compact"})
    keys = [b"k%d" % (i % 7) for i in range(50)]
    env.produce("t", [(0, k, b"v%d" % i) for i, k in enumerate(keys)])
    env.produce("t", [(0, b"k1", b"last")])
    env.compactor().run_once(everything=True)
    got = env.read("t", 0)
    want = sorted(latest_per_key(env.produced[("t", 0)]).values())
    assert got == want
    assert got[-1] == (50, b"k1", b"last")


def test_tombstones_live_for_delete_retention_after_first_clean(env: Env) -> None:
    env.md.create_topic("t", 1, {"cleanup.policy": "compact", "delete.retention.ms": "1000"})
    env.produce("t", [(0, b"a", b"1"), (0, b"b", b"1"), (0, b"a", None)])
    comp = env.compactor()
    comp.run_once(everything=True)
    assert env.read("t", 0) == [(1, b"b", b"1"), (2, b"a", None)]
    env.clock.advance(999)
    env.produce("t", [(0, b"c", b"1")])
    comp.run_once(everything=True)
    assert (2, b"a", None) in env.read("t", 0)  # horizon not passed yet
    env.clock.advance(2)
    env.produce("t", [(0, b"d", b"1")])
    (report,) = comp.run_once(everything=True)
    assert report.stats["tombstones_dropped"] == 1
    assert env.read("t", 0) == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"d", b"1")]


def test_tombstone_kept_when_job_does_not_hold_the_whole_log(env: Env) -> None:
    env.md.create_topic("t", 1, {"cleanup.policy": "compact", "delete.retention.ms": "0"})
    env.produce("t", [(0, b"a", b"1")])
    env.compactor().run_once(everything=True)  # L1 file holding a=1
    env.produce("t", [(0, b"a", None)])
    env.produce("t", [(0, b"b", b"1")])
    # A merge of the two newest files only (not the whole log) must keep the tombstone.
    comp = env.compactor()
    snap = comp.snapshot()[1]
    newest = sorted(f.file_id for f in snap.files if f.level == 0)
    from planner import propose_all
    spec = propose_all(snap, env.clock.now_ms())  # the full job, to learn the spec shape
    assert spec.jobs
    from planner.model import JobSpec, PartitionPlan, Trigger
    partial = JobSpec("partial", tuple(newest), 1, Trigger.FORCED_ALL, "test", 0,
                      (PartitionPlan("t", 0, False, 2**63 - 1, 0),))
    report = comp.run_job(partial)
    assert report.outcome == "committed", report.error
    assert (1, b"a", None) in env.read("t", 0)
    assert env.read("t", 0)[0] == (0, b"a", b"1")


def test_partial_clean_with_a_tiny_map_never_drops_a_latest_record(env: Env) -> None:
    env.md.create_topic("t", 1, {"cleanup.policy": "compact"})
    rng = random.Random(3)
    env.produce("t", [(0, b"k%d" % rng.randrange(40), b"v%d" % i) for i in range(400)])
    (report,) = env.compactor(memory_budget=24 * 10).run_once(everything=True)
    assert report.stats["partial_cleans"] == 1
    got = env.read("t", 0)
    produced = env.produced[("t", 0)]
    assert set(latest_per_key(produced).values()) <= set(got)
    assert set(got) <= set(produced)
    assert len(got) < len(produced)
    # Each pass moves the cleaner checkpoint past what its map covered; once it reaches the
    # end, every key has been deduplicated: one record per key, then nothing left to do.
    passes = 0
    while env.compactor(memory_budget=24 * 10).run_once(everything=True):
        passes += 1
        assert passes < 100
    assert sorted(env.read("t", 0)) == sorted(latest_per_key(produced).values())


def test_offset_gaps_survive_repeated_cleans_and_reads_inside_a_gap(env: Env) -> None:
    env.md.create_topic("t", 1, {"cleanup.policy": "compact"})
    env.produce("t", [(0, b"a", b"1"), (0, b"a", b"2"), (0, b"a", b"3"), (0, b"b", b"1")])
    for _ in range(3):
        env.compactor().run_once(everything=True)
        assert env.read("t", 0) == [(2, b"a", b"3"), (3, b"b", b"1")]
    assert env.read("t", 0, start=1) == [(2, b"a", b"3"), (3, b"b", b"1")]
    assert env.read("t", 0, start=3) == [(3, b"b", b"1")]
    assert env.read("t", 0, start=4) == []


def test_min_compaction_lag_keeps_recent_records(env: Env) -> None:
    env.md.create_topic("t", 1, {"cleanup.policy": "compact",
                                 "min.compaction.lag.ms": "60000"})
    env.produce("t", [(0, b"a", b"old")])
    env.clock.advance(120_000)
    env.produce("t", [(0, b"a", b"new1"), (0, b"a", b"new2")])
    env.compactor().run_once(everything=True)
    # Offset 0 is cleanable but its key reappears only in the uncleanable range: kept, as
    # Kafka's map covers [start, first uncleanable offset) only; recent records untouched.
    assert env.read("t", 0) == [(0, b"a", b"old"), (1, b"a", b"new1"), (2, b"a", b"new2")]
    env.clock.advance(120_000)
    env.produce("t", [(0, b"z", b"1")])
    env.clock.advance(120_000)
    env.compactor().run_once(everything=True)
    assert env.read("t", 0) == [(2, b"a", b"new2"), (3, b"z", b"1")]


def test_delete_policy_data_is_untouched(env: Env) -> None:
    env.md.create_topic("e", 2)
    env.md.create_topic("c", 2, {"cleanup.policy": "compact,delete"})
    env.produce("e", [(i % 2, b"same", b"%d" % i) for i in range(30)])
    env.produce("c", [(i % 2, b"same", b"%d" % i) for i in range(30)])
    env.compactor().run_once(everything=True)
    for p in range(2):
        assert env.read("e", p) == env.produced[("e", p)]
        assert len(env.read("c", p)) == 1
    files = env.md.snapshot().files
    assert len(files) == 2 and {f.holds_compacted for f in files} == {True, False}


# ------------------------------------------------------------------ property test


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(
    st.tuples(
        st.lists(st.tuples(st.sampled_from(["c", "d"]), st.integers(0, 2), st.integers(0, 6),
                           st.booleans()), min_size=1, max_size=40),
        st.sampled_from(["all", "plan", "none"]),
        st.integers(0, 3000),
    ), min_size=1, max_size=4))
def test_random_workloads_against_a_model(
    tmp_path_factory: pytest.TempPathFactory,
    rounds: list[tuple[list[tuple[str, int, int, bool]], str, int]],
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    clock = ManualClock()
    md = MetadataStore.open(f"sqlite:///{tmp}/md.db", clock=clock, create=True)
    e = Env(open_store(f"memory://prop-{tmp.name}"), md, clock)
    md.create_topic("c", 3, {"cleanup.policy": "compact", "delete.retention.ms": "1000"})
    md.create_topic("d", 3)
    for rows, action, advance in rounds:
        for topic in ("c", "d"):
            batch = [(p, b"k%d" % k, None if (tomb and topic == "c") else b"v%d" % k)
                     for t, p, k, tomb in rows if t == topic]
            if batch:
                e.produce(topic, batch)
        clock.advance(advance)
        comp = e.compactor()
        if action == "all":
            comp.run_once(everything=True)
        elif action == "plan":
            comp.run_once()
        for p in range(3):
            produced_d = e.produced.get(("d", p), [])
            assert e.read("d", p) == produced_d
            produced = e.produced.get(("c", p), [])
            got = e.read("c", p)
            assert set(got) <= set(produced) and got == sorted(got)  # subsequence, offsets
            latest = latest_per_key(produced)
            for rec in latest.values():
                if rec[2] is not None:
                    assert rec in got  # the latest value of every live key is there
            got_keys = latest_per_key(got)
            for key, rec in got_keys.items():
                assert latest[key] == rec  # nothing older resurfaces as the latest
            if action == "all":
                assert len(got) == len({r[1] for r in got})  # one record per key
    md.close()


# ------------------------------------------------------------------ concurrency


def test_concurrent_workers_commit_each_job_once(metadata_url: str, tmp_path: Path) -> None:
    clock = ManualClock()
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    store_url = f"memory://conc-{tmp_path.name}"
    e = Env(open_store(store_url), md, clock)
    md.create_topic("c", 4, {"cleanup.policy": "compact"})
    for rnd in range(4):
        e.produce("c", [(i % 4, b"k%d" % (i % 9), b"%d-%d" % (rnd, i)) for i in range(60)])
    reports: list[Any] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        own = MetadataStore.open(metadata_url, clock=clock, create=True)
        comp = Compactor(open_store(store_url), own, clock=clock)
        barrier.wait()
        reports.extend(comp.run_once(everything=True))
        own.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    committed = [r for r in reports if r.outcome == "committed"]
    assert len(committed) == 1
    assert len(md.list_jobs(state="committed")) == 1
    for p in range(4):
        assert sorted(e.read("c", p)) == sorted(latest_per_key(e.produced[("c", p)]).values())
    md.close()


def test_stale_lease_cannot_commit(env: Env) -> None:
    env.md.create_topic("c", 1, {"cleanup.policy": "compact"})
    env.produce("c", [(0, b"a", b"1"), (0, b"a", b"2")])
    comp = env.compactor(lease_ms=1000)
    spec = comp.plan(everything=True).jobs[0]
    old = env.md.lease_job(spec.spec_id, spec.input_file_ids, owner="zombie", lease_ms=1000)
    env.clock.advance(1001)
    report = comp.run_job(spec)  # takes the job over with a higher fence
    assert report.outcome == "committed" and report.fence == old.fence + 1
    with pytest.raises(StaleLeaseError):
        env.md.commit_compaction(old, outputs=[])
    assert env.read("c", 0) == [(1, b"a", b"2")]


def test_commit_racing_a_conflicting_commit_is_refused(env: Env) -> None:
    env.md.create_topic("c", 1, {"cleanup.policy": "compact"})
    env.produce("c", [(0, b"a", b"1")])
    env.produce("c", [(0, b"a", b"2")])
    comp = env.compactor()
    spec = comp.plan(everything=True).jobs[0]
    lease = env.md.lease_job(spec.spec_id, spec.input_file_ids, owner="w1", lease_ms=60_000)
    # The other file set changes underneath (e.g. retention): simulate by retiring a file.
    env.md.release_job(lease)
    assert comp.run_once(everything=True)[0].outcome == "committed"
    lease2 = env.md.lease_job("other", (), owner="w2", lease_ms=60_000)
    with pytest.raises(CommitConflictError):
        fake = lease2.__class__(lease2.job_id, "other", lease2.fence, "w2",
                                spec.input_file_ids, lease2.expires_ms)
        env.md.commit_compaction(fake, outputs=[])
    assert env.read("c", 0) == [(1, b"a", b"2")]


# ------------------------------------------------------------------ crashes


class ExplodingStore:
    """Wraps a store; uploads of compaction outputs fail after `after` bytes."""

    def __init__(self, inner: Any, after: int) -> None:
        self._inner = inner
        self._after = after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_stream(self, key: str) -> Any:
        writer = self._inner.put_stream(key)
        limit = self._after

        class Writer:
            written = 0

            def write(self, data: bytes) -> int:
                Writer.written += len(data)
                if Writer.written > limit:
                    raise OSError("killed mid-upload")
                return int(writer.write(data))

            def close(self) -> None:
                writer.close()

            def abort(self) -> None:
                writer.abort()

        return Writer()


@pytest.mark.parametrize("where", ["before_upload", "mid_upload", "commit_fails",
                                   "commit_unknown"])
def test_crash_leaves_topic_readable_and_a_later_run_finishes(
    env: Env, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.md.create_topic("c", 2, {"cleanup.policy": "compact"})
    env.md.create_topic("d", 2)
    for rnd in range(3):
        env.produce("c", [(i % 2, b"k%d" % (i % 5), b"%d-%d" % (rnd, i)) for i in range(40)])
        env.produce("d", [(i % 2, None, b"%d" % i) for i in range(10)])
    before = {(t, p): env.read(t, p) for t in ("c", "d") for p in range(2)}
    store: Any = env.store
    if where == "before_upload":
        store = ExplodingStore(env.store, 0)
    elif where == "mid_upload":
        store = ExplodingStore(env.store, 100)
    comp = Compactor(store, env.md, CompactorConfig(lease_ms=5000), clock=env.clock)
    if where == "commit_fails":
        monkeypatch.setattr(env.md, "commit_compaction",
                            lambda *a, **k: (_ for _ in ()).throw(RuntimeError("killed")))
    if where == "commit_unknown":
        monkeypatch.setattr(env.md, "commit_compaction",
                            lambda *a, **k: (_ for _ in ()).throw(CommitUnknownError("?")))
    (report,) = comp.run_once(everything=True)
    assert report.outcome in ("failed", "unknown")
    monkeypatch.undo()
    assert {(t, p): env.read(t, p) for t in ("c", "d") for p in range(2)} == before
    env.clock.advance(61_000)  # lease expired, grace passed
    (report,) = env.compactor().run_once(everything=True)
    assert report.outcome == "committed", report.error
    for p in range(2):
        assert env.read("d", p) == before[("d", p)]
        assert sorted(env.read("c", p)) == sorted(latest_per_key(before[("c", p)]).values())
    # Leftover outputs of the crashed attempt are collected after the grace period.
    env.clock.advance(61_000)
    env.compactor().collect_garbage()
    live = {f.object_key for f in env.md.snapshot().files}
    assert {o.key for o in env.store.list()} == live


def test_retired_inputs_are_deleted_only_after_the_grace_period(env: Env) -> None:
    env.md.create_topic("c", 1, {"cleanup.policy": "compact"})
    env.produce("c", [(0, b"a", b"1")])
    env.produce("c", [(0, b"a", b"2")])
    inputs = {o.key for o in env.store.list()}
    comp = env.compactor(grace_ms=60_000)
    comp.run_once(everything=True)
    assert inputs <= {o.key for o in env.store.list()}  # a reader in flight can finish
    env.clock.advance(59_000)
    assert comp.collect_garbage().deleted == []
    env.clock.advance(2_000)
    assert set(comp.collect_garbage().deleted) == inputs
    assert not inputs & {o.key for o in env.store.list()}


def test_gc_timer_lists_unfinished_uploads_at_most_once_an_hour(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unfinished-upload listing (one request) runs on the first GC pass, then once
    UPLOAD_SWEEP_INTERVAL_MS has passed; `silt gc` (sweep_uploads=True) always lists."""
    comp = env.compactor()
    listings: list[int] = []
    real = comp.store.unfinished_uploads

    def spy(before: int) -> Sequence[UnfinishedUpload]:
        listings.append(before)
        return real(before)

    monkeypatch.setattr(comp.store, "unfinished_uploads", spy)
    comp.collect_garbage()
    env.clock.advance(UPLOAD_SWEEP_INTERVAL_MS - 1)
    comp.collect_garbage()
    assert len(listings) == 1
    comp.collect_garbage(sweep_uploads=True)
    assert len(listings) == 2
    env.clock.advance(UPLOAD_SWEEP_INTERVAL_MS)
    comp.collect_garbage()
    assert len(listings) == 3
