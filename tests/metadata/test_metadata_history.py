"""Bounded metadata on every backend: `prune` removes deleted files (with their segments)
and finished jobs past their retention and nothing else, never lets an id be handed out
again; and the incremental snapshot always equals a full read."""

from __future__ import annotations

import random
from typing import Any

import pytest
import sqlalchemy as sa

from clock import ManualClock
from metadata import MetadataStore, PruneResult
from metadata.config import MetadataConfig
from metadata.errors import StaleLeaseError
from tests.layouts import layout
from tests.metadata.metadata_helpers import chunk, commit
from tests.metadata.test_metadata_jobs import oseg, output

FILES_KEPT_MS = 5_000
JOBS_KEPT_MS = 50_000


@pytest.fixture
def store(metadata_url: str, clock: ManualClock) -> Any:
    md = MetadataStore.open(metadata_url, clock=clock, config=MetadataConfig(
        deleted_files_retention_ms=FILES_KEPT_MS, jobs_retention_ms=JOBS_KEPT_MS), create=True)
    yield md
    md.close()


def rows(store: MetadataStore, table: str) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY id")).all())


def delete_files(store: MetadataStore, ids: list[int]) -> None:
    """GC as the compactor runs it: deleting, then deleted."""
    assert store.mark_deleting(ids) == sorted(ids)
    assert store.mark_deleted(ids) == sorted(ids)


def test_prune_removes_deleted_files_and_their_segments_after_the_retention(
        store: MetadataStore, clock: ManualClock) -> None:
    store.create_topic("t", 2)
    for key in ("a", "b", "c", "d"):
        commit(store, key, [chunk("t", 0), chunk("t", 1)])
    a, b, c, d = (f.id for f in store.snapshot().files)
    store.delete_records({("t", 0): 3, ("t", 1): 3})  # a, b, c retire; d stays live
    delete_files(store, [a, b])
    clock.advance(FILES_KEPT_MS - 1)
    delete_files(store, [c])
    assert store.prune() == PruneResult(0, 0, 0)  # none deleted long enough ago
    clock.advance(1)
    assert store.prune() == PruneResult(2, 4, 0)  # a and b with their 2 segments each
    assert [r.id for r in rows(store, "files")] == [c, d]
    assert sorted({r.file_id for r in rows(store, "segments")}) == [c, d]
    clock.advance(FILES_KEPT_MS)
    assert store.prune() == PruneResult(1, 2, 0)
    assert [r.id for r in rows(store, "files")] == [d]
    assert [(s.topic, s.partition, s.base_offset) for s in store.snapshot().segments] == [
        ("t", 0, 3), ("t", 1, 3)]
    assert store.find_segments("t", 0, 3)[0].file_id == d


def test_prune_never_lets_an_id_be_reused(store: MetadataStore, clock: ManualClock) -> None:
    """The highest file, segment and job ids stay, so SQLite never hands one out again."""
    store.create_topic("t", 1)
    store.create_topic("u", 1)
    commit(store, "a", [chunk("t", 0)])
    commit(store, "b", [chunk("u", 0)])
    a, b = (f.id for f in store.snapshot().files)
    top_segment = max(r.id for r in rows(store, "segments"))
    store.delete_topic("t")
    store.delete_records({("u", 0): 1})
    delete_files(store, [a, b])
    lease = store.lease_job("spec", [], owner="w", lease_ms=1)
    store.release_job(lease)
    clock.advance(JOBS_KEPT_MS)
    assert store.prune() == PruneResult(1, 0, 0)  # b (the highest file id) and its job stay
    assert [r.id for r in rows(store, "files")] == [b]
    assert [r.id for r in rows(store, "jobs")] == [lease.job_id]
    assert store.register_pending_file("c") > b
    commit(store, "d", [chunk("u", 0)])
    assert min(r.id for r in rows(store, "segments") if r.live) > top_segment
    assert store.lease_job("spec", [], owner="w", lease_ms=1).job_id > lease.job_id


def test_prune_removes_finished_jobs_and_long_expired_leases(
        store: MetadataStore, clock: ManualClock) -> None:
    store.create_topic("t", 1)
    for key in ("a", "b", "c", "d"):
        commit(store, key, [chunk("t", 0)])
    a, b, c, d = (f.id for f in store.snapshot().files)
    done = store.lease_job("done", [a], owner="w", lease_ms=1_000)
    store.commit_compaction(done, outputs=[output(store, "out", oseg("t", 0, 0, 0))])
    failed = store.lease_job("failed", [b], owner="w", lease_ms=1_000)
    store.release_job(failed, result={"error": "boom"})
    lost = store.lease_job("lost", [c], owner="zombie", lease_ms=1_000)  # never renewed
    clock.advance(JOBS_KEPT_MS - 1)
    running = store.lease_job("running", [d], owner="w", lease_ms=JOBS_KEPT_MS * 10)
    assert store.prune().jobs == 0
    clock.advance(1_001)  # the lost lease expired a retention ago; the others ended then
    assert store.prune() == PruneResult(0, 0, 3)
    assert [j.spec_id for j in store.list_jobs()] == ["running"]
    assert store.get_file(c).job_id is None and store.get_file(d).job_id == running.job_id
    with pytest.raises(StaleLeaseError):  # the zombie's late commit is refused
        store.commit_compaction(lost, outputs=[output(store, "late", oseg("t", 0, 2, 2))])
    assert store.get_file(c).state == "live"


def test_snapshot_reads_what_changed_and_always_equals_a_full_read(
        store: MetadataStore, clock: ManualClock) -> None:
    """Random agent commits, retention cuts, compactions, leases and topic deletions: the
    incremental snapshot of one handle equals a fresh handle's full read every time."""
    rng = random.Random(7)
    fresh = MetadataStore.open(store.url, clock=clock, create=True)
    topics = ["t", "u"]
    for t in topics:
        store.create_topic(t, 3, {"cleanup.policy": "delete"})
    for n in range(60):
        op = rng.random()
        live = [f.id for f in store.snapshot().files if not f.leased]
        if op < 0.5 or not live:
            t = rng.choice(topics)
            parts = rng.sample(range(3), rng.randint(1, 3))
            commit(store, f"f{n}", [chunk(t, p, rng.randint(1, 3)) for p in parts])
        elif op < 0.65:
            t, p = rng.choice(topics), rng.randrange(3)
            end = store.partitions(t)[p].next_offset
            store.delete_records({(t, p): rng.randint(0, end)})
        elif op < 0.8:
            fid = rng.choice(live)
            segs = store.snapshot().file_segments[fid]
            lease = store.lease_job(f"job{n}", [fid], owner="w", lease_ms=10_000)
            outs = [oseg(x.topic, x.partition, x.base_offset, x.last_offset)
                    for x in segs if rng.random() < 0.7]
            store.commit_compaction(lease, outputs=[output(store, f"o{n}", *outs)]
                                    if outs else [])
        elif op < 0.9:
            store.lease_job(f"held{n}", [rng.choice(live)], owner="w", lease_ms=3_000)
        elif n > 40 and len(topics) > 1:
            store.delete_topic(topics.pop())
        clock.advance(1_000)
        assert store.snapshot() == fresh.snapshot()
        fresh.segment_cache.clear()  # its next snapshot reads everything again
    fresh.close()


def test_a_version_4_database_gains_the_change_marker(metadata_url: str) -> None:
    """Files registered before version 5 get segments_version 0 and snapshot as any."""
    from metadata import schema as s
    from metadata.engine import make_engine

    engine = make_engine(metadata_url, create=True)
    with engine.connect() as conn:
        conn.execution_options(silt_write=True)
        with conn.begin():
            s.md.create_all(conn, tables=[s.schema_version])
            for version, migrate in enumerate(s.MIGRATIONS[:4], 1):
                migrate(conn, 0)
                conn.execute(s.schema_version.insert().values(version=version,
                                                              applied_at_ms=0))
            conn.execute(sa.text(
                "INSERT INTO files (object_key, level, state, holds_compacted, created_at_ms,"
                " state_changed_at_ms) VALUES ('old', 0, 'pending', FALSE, 0, 0)"))
    engine.dispose()
    store = MetadataStore.open(metadata_url)  # migrating an existing database
    assert store.schema_version() == s.LATEST_VERSION
    store.create_topic("t", 1)
    store.commit_file(1, layout([chunk("t", 0, 2)], size=1000, data_offset=8, data_length=900,
                                meta_offset=908, meta_length=92))
    assert [(f.object_key, len(store.snapshot().file_segments[f.id]))
            for f in store.snapshot().files] == [("old", 1)]
    assert [r.segments_version for r in rows(store, "files")] == [0]
    store.close()
