"""Compaction jobs on every backend: leases and fencing, atomic commit_compaction with
revalidation and overlap checks, release, GC of retired files after the grace period, and
workers racing for one job on separate handles."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from clock import ManualClock
from metadata import CompactionOutput, Lease, MetadataStore, OutputSegment
from metadata import schema as s
from metadata.errors import (
    CommitConflictError,
    CommitUnknownError,
    InvalidCommitError,
    JobConflictError,
    JobLeasedError,
    MetadataError,
    StaleLeaseError,
    UnknownJobError,
)
from tests.layouts import layout
from tests.metadata.metadata_helpers import chunk, commit, lose_next_commit

LEASE_MS = 30_000
GRACE_MS = 60_000


def oseg(topic: str, partition: int, base: int, last: int, records: int = 1,
         cleaned_at_ms: int | None = None) -> OutputSegment:
    return OutputSegment(
        topic=topic, partition=partition, base_offset=base, last_offset=last,
        record_count=records, data_pos=0, data_len=10 * records, hash_pos=0,
        hash_count=records, batch_count=1, min_timestamp=1, max_timestamp=2,
        tombstone_count=0, frame_crc=7, cleaned_at_ms=cleaned_at_ms)


def output(store: MetadataStore, key: str, *segs: OutputSegment) -> CompactionOutput:
    """Register a pending level-1 file and describe it as a compaction output."""
    fid = store.register_pending_file(key, level=1, holds_compacted=True)
    return CompactionOutput(fid, layout(size=500, data_offset=8, data_length=400,
                                        meta_offset=408, meta_length=92), segments=tuple(segs))


def files_of(store: MetadataStore) -> list[int]:
    return sorted(f.id for f in store.snapshot().files)


def state_of(store: MetadataStore) -> Any:
    """Everything a refused commit must leave unchanged (pending outputs registered since
    are left out: an output that went live would show among the live files)."""
    snap = store.snapshot()
    return (
        sorted((f.id, f.state, f.job_id, f.leased) for f in snap.files),
        sorted((f.id, f.state) for f in store.files_to_gc(2**62) if f.state != "pending"),
        sorted((x.id, x.file_id, x.topic, x.partition, x.base_offset, x.last_offset)
               for x in snap.segments),
        [(j.id, j.state, j.fence, j.owner) for j in store.list_jobs()],
        sorted((p.topic, p.partition, p.next_offset, p.clean_offset) for p in snap.partitions),
    )


def three_files(store: MetadataStore) -> list[int]:
    """Topic t (2 partitions): t/0 gets [0,2] [3,5] [6,8], t/1 gets [0,1] in the first."""
    store.create_topic("t", 2)
    commit(store, "l0-a", [chunk("t", 0, 3), chunk("t", 1, 2)])
    commit(store, "l0-b", [chunk("t", 0, 3)])
    commit(store, "l0-c", [chunk("t", 0, 3)])
    return files_of(store)


# ------------------------------------------------------------------ lease and commit


def test_commit_replaces_inputs_with_outputs(store: MetadataStore, clock: ManualClock) -> None:
    f1, f2, f3 = three_files(store)
    lease = store.lease_job("spec-1", [f2, f1], owner="w1", lease_ms=LEASE_MS)
    assert (lease.fence, lease.input_file_ids, lease.expires_ms) == (
        1, (f1, f2), clock.now_ms() + LEASE_MS)
    snap = store.snapshot()
    assert {f.id: f.leased for f in snap.files} == {f1: True, f2: True, f3: False}
    assert snap.leased_file_ids == {f1, f2}
    assert store.get_file(f1).leased and store.get_file(f1).job_id == lease.job_id
    job = store.get_job(lease.job_id)
    assert (job.state, job.spec_id, job.owner, job.attempts, job.input_segments) == (
        "leased", "spec-1", "w1", 1, 3)

    # t/0 [0,5] keeps 2 records (offset gaps); every record of t/1 was removed: no segment.
    out = output(store, "l1-a", oseg("t", 0, 0, 5, records=2, cleaned_at_ms=123))
    clock.advance(5)
    done = store.commit_compaction(lease, outputs=[out], result={"records_out": 2})
    assert (done.job_id, done.retired_file_ids, done.output_file_ids) == (
        lease.job_id, (f1, f2), (out.file_id,))

    segs = store.find_segments("t", 0, 0)
    assert [(x.file_id, x.base_offset, x.last_offset, x.record_count) for x in segs] == [
        (out.file_id, 0, 5, 2), (f3, 6, 8, 3)]
    new = segs[0]
    assert (new.cleaned_at_ms, new.created_at_ms, new.tombstone_count, new.data_len,
            new.frame_crc, new.object_key, new.file_size) == (
        123, clock.now_ms(), 0, 20, 7, "l1-a", 500)
    assert store.find_segments("t", 1, 0) == []
    assert store.find_segments("t", 0, 3)[0].file_id == out.file_id  # inside a gap's segment

    for fid in (f1, f2):
        info = store.get_file(fid)
        assert (info.state, info.job_id, info.leased, info.state_changed_at_ms) == (
            "retired", None, False, clock.now_ms())
    o = store.get_file(out.file_id)
    assert o.layout is not None
    assert (o.state, o.level, o.holds_compacted, o.size, o.layout.meta_offset) == (
        "live", 1, True, 500, 408)
    job = store.get_job(lease.job_id)
    assert (job.state, job.result) == ("committed", {"records_out": 2})
    assert store.list_jobs(state="committed") == [job]
    assert store.list_jobs(state="leased") == []
    snap = store.snapshot()
    assert sorted(f.id for f in snap.files) == [f3, out.file_id]
    assert not any(f.leased for f in snap.files)
    assert store.stats().files_by_state == {"live": 2, "retired": 2}
    # Finished: the stale holder can neither renew nor commit again; release is a no-op.
    with pytest.raises(StaleLeaseError):
        store.renew_lease(lease, LEASE_MS)
    with pytest.raises(StaleLeaseError):
        store.commit_compaction(lease, outputs=[])
    store.release_job(lease)
    assert store.get_job(lease.job_id).state == "committed"


def test_second_lease_of_a_leased_spec_is_refused(store: MetadataStore,
                                                  clock: ManualClock) -> None:
    f1, f2, f3 = three_files(store)
    lease = store.lease_job("spec", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    before = state_of(store)
    with pytest.raises(JobLeasedError, match="w1") as err:
        store.lease_job("spec", [f1, f2], owner="w2", lease_ms=LEASE_MS)
    assert not err.value.retriable
    # Another spec sharing a held file, or naming a file that is not live.
    with pytest.raises(JobConflictError, match=f"input file {f2} is held by job {lease.job_id}"):
        store.lease_job("other", [f2, f3], owner="w2", lease_ms=LEASE_MS)
    with pytest.raises(JobConflictError, match="input file 999 is unknown"):
        store.lease_job("missing", [f3, 999], owner="w2", lease_ms=LEASE_MS)
    pending = store.register_pending_file("p")
    with pytest.raises(JobConflictError, match=f"input file {pending} is pending"):
        store.lease_job("pending", [pending], owner="w2", lease_ms=LEASE_MS)
    assert state_of(store) == before
    # Renewing moves the expiry; the job stays refused to others.
    clock.advance(LEASE_MS - 1)
    renewed = store.renew_lease(lease, LEASE_MS)
    assert renewed.expires_ms == clock.now_ms() + LEASE_MS
    assert store.get_job(lease.job_id).lease_expires_ms == renewed.expires_ms
    clock.advance(LEASE_MS - 1)
    with pytest.raises(JobLeasedError):
        store.lease_job("spec", [f1, f2], owner="w2", lease_ms=LEASE_MS)


def test_expired_lease_is_taken_over_and_the_old_fence_cannot_commit(
        store: MetadataStore, clock: ManualClock) -> None:
    f1, f2, _ = three_files(store)
    old = store.lease_job("spec", [f1, f2], owner="zombie", lease_ms=LEASE_MS)
    old_out = output(store, "zombie-out", oseg("t", 0, 0, 5), oseg("t", 1, 0, 1))
    clock.advance(LEASE_MS)  # expired: lease_expires_ms is no longer in the future
    assert not store.snapshot().files[0].leased
    with pytest.raises(JobConflictError, match="has inputs"):
        store.lease_job("spec", [f1], owner="w2", lease_ms=LEASE_MS)
    new = store.lease_job("spec", [f1, f2], owner="w2", lease_ms=LEASE_MS)
    assert (new.job_id, new.fence) == (old.job_id, 2)
    job = store.get_job(new.job_id)
    assert (job.owner, job.fence, job.attempts) == ("w2", 2, 2)
    assert store.get_file(f1).leased

    before = state_of(store)
    with pytest.raises(StaleLeaseError) as err:
        store.commit_compaction(old, outputs=[old_out])
    assert not err.value.retriable
    with pytest.raises(StaleLeaseError):
        store.renew_lease(old, LEASE_MS)
    store.release_job(old)  # a stale holder's release changes nothing
    assert state_of(store) == before
    assert store.get_file(old_out.file_id).state == "pending"

    new_out = output(store, "w2-out", oseg("t", 0, 0, 5), oseg("t", 1, 0, 1))
    store.commit_compaction(new, outputs=[new_out])
    assert store.get_job(new.job_id).state == "committed"
    assert [x.file_id for x in store.find_segments("t", 0, 0)][:1] == [new_out.file_id]


def test_an_expired_lease_nobody_took_over_still_commits(store: MetadataStore,
                                                          clock: ManualClock) -> None:
    f1, f2, _ = three_files(store)
    lease = store.lease_job("spec", [f1, f2], owner="slow", lease_ms=LEASE_MS)
    clock.advance(10 * LEASE_MS)
    out = output(store, "out", oseg("t", 0, 0, 5), oseg("t", 1, 0, 1))
    store.commit_compaction(lease, outputs=[out])
    assert store.get_job(lease.job_id).fence == 1
    assert store.get_file(f1).state == "retired"


def test_takeover_of_a_job_whose_inputs_are_gone_abandons_it(store: MetadataStore,
                                                             clock: ManualClock) -> None:
    f1, f2, f3 = three_files(store)
    stuck = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    clock.advance(LEASE_MS)
    other = store.lease_job("b", [f2, f3], owner="w2", lease_ms=LEASE_MS)  # f2 is free now
    with pytest.raises(JobConflictError, match=f"held by job {other.job_id}"):
        store.lease_job("a", [f1, f2], owner="w3", lease_ms=LEASE_MS)
    store.commit_compaction(other, outputs=[output(store, "b-out", oseg("t", 0, 3, 8, 2))])
    with pytest.raises(JobConflictError, match="abandoned"):
        store.lease_job("a", [f1, f2], owner="w3", lease_ms=LEASE_MS)
    job = store.get_job(stuck.job_id)
    assert (job.state, job.fence) == ("abandoned", 1)
    assert store.get_file(f1).job_id is None
    with pytest.raises(StaleLeaseError):
        store.commit_compaction(stuck, outputs=[])


# ------------------------------------------------------------------ revalidation


def test_commit_after_another_job_retired_a_shared_file_conflicts(
        store: MetadataStore, clock: ManualClock) -> None:
    f1, f2, f3 = three_files(store)
    a = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    a_out = output(store, "a-out", oseg("t", 0, 0, 5), oseg("t", 1, 0, 1))
    clock.advance(LEASE_MS)  # a's lease expired: f2 may be taken by another job
    b = store.lease_job("b", [f2, f3], owner="w2", lease_ms=LEASE_MS)
    store.commit_compaction(b, outputs=[output(store, "b-out", oseg("t", 0, 3, 8, 2))])
    before = state_of(store)
    with pytest.raises(CommitConflictError, match=f"input file {f2} is retired") as err:
        store.commit_compaction(a, outputs=[a_out])
    assert err.value.retriable
    assert state_of(store) == before
    assert store.get_file(a_out.file_id).state == "pending"  # GC collects it
    assert store.get_job(a.job_id).state == "leased"


def test_commit_after_an_input_segment_went_away_conflicts(store: MetadataStore) -> None:
    f1, f2, _ = three_files(store)
    lease = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    out = output(store, "out", oseg("t", 0, 0, 5), oseg("t", 1, 0, 1))
    # What retention would do: one segment of a still-live input stops being live.
    with store.engine.begin() as conn:
        conn.execute(s.segments.update().where(s.segments.c.file_id == f1,
                                               s.segments.c.partition == 1).values(live=False))
    before = state_of(store)
    with pytest.raises(CommitConflictError, match="no longer live"):
        store.commit_compaction(lease, outputs=[out])
    assert state_of(store) == before


def test_output_overlapping_a_live_non_input_segment_is_refused(store: MetadataStore) -> None:
    f1, f2, f3 = three_files(store)
    lease = store.lease_job("a", [f1, f3], owner="w1", lease_ms=LEASE_MS)  # f2 [3,5] between
    before = state_of(store)
    wide = output(store, "wide", oseg("t", 0, 0, 8, 3), oseg("t", 1, 0, 1))
    with pytest.raises(CommitConflictError, match="overlaps live segment"):
        store.commit_compaction(lease, outputs=[wide])
    for seg in (oseg("t", 0, 5, 6), oseg("t", 0, 2, 3), oseg("t", 0, 4, 4)):
        with pytest.raises(CommitConflictError, match="overlaps"):
            store.commit_compaction(lease, outputs=[output(store, f"o{seg.base_offset}", seg)])
    assert state_of(store) == before
    # Touching but not overlapping is fine: one output per side of f2.
    left = output(store, "left", oseg("t", 0, 0, 2), oseg("t", 1, 0, 1))
    right = output(store, "right", oseg("t", 0, 6, 8))
    store.commit_compaction(lease, outputs=[left, right])
    assert [(x.file_id, x.base_offset) for x in store.find_segments("t", 0, 0)] == [
        (left.file_id, 0), (f2, 3), (right.file_id, 6)]


def test_malformed_outputs_are_refused_before_any_change(store: MetadataStore) -> None:
    f1, f2, _ = three_files(store)
    lease = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    before = state_of(store)
    bad = [
        [output(store, "x1", oseg("t", 0, 0, 3)), output(store, "x2", oseg("t", 0, 3, 5))],
        [output(store, "x3", oseg("t", 0, 4, 3))],
        [output(store, "x4", oseg("t", 0, 0, 1, records=3))],
        [output(store, "x5")],
        [output(store, "x6", oseg("t", 0, 0, 9))],  # past the log end (next_offset 9)
    ]
    for outs in bad:
        with pytest.raises(InvalidCommitError):
            store.commit_compaction(lease, outputs=outs)
    with pytest.raises(MetadataError, match="no partition 5"):
        store.commit_compaction(lease, outputs=[output(store, "x7", oseg("t", 5, 0, 0))])
    assert state_of(store) == before
    store.commit_compaction(lease, outputs=[output(store, "ok", oseg("t", 0, 0, 5))])


def test_collected_output_file_makes_the_commit_conflict(store: MetadataStore,
                                                         clock: ManualClock) -> None:
    f1, f2, _ = three_files(store)
    lease = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    out = output(store, "out", oseg("t", 0, 0, 5))
    clock.advance(GRACE_MS)
    assert store.mark_deleting([f.id for f in store.files_to_gc(clock.now_ms() - GRACE_MS)]) == [
        out.file_id]
    before = state_of(store)
    with pytest.raises(CommitConflictError, match="not pending"):
        store.commit_compaction(lease, outputs=[out])
    assert state_of(store) == before


@pytest.mark.parametrize("applied", [True, False])
def test_lost_commit_outcome_is_read_back(store: MetadataStore, monkeypatch: pytest.MonkeyPatch,
                                          applied: bool) -> None:
    f1, f2, _ = three_files(store)
    lease = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    out = output(store, "out", oseg("t", 0, 0, 5))
    lose_next_commit(monkeypatch, applied)
    if applied:
        done = store.commit_compaction(lease, outputs=[out])
        assert done.output_file_ids == (out.file_id,)
        assert store.get_file(f1).state == "retired"
    else:
        with pytest.raises(CommitUnknownError):
            store.commit_compaction(lease, outputs=[out])
        assert store.get_file(f1).state == "live"
        assert store.get_job(lease.job_id).state == "leased"


def test_error_before_commit_is_retried_like_an_agent_commit(
        store: MetadataStore) -> None:
    """One rule for every commit: a database error before COMMIT rolls back and retries."""
    f1, f2, _ = three_files(store)
    lease = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    out = output(store, "out", oseg("t", 0, 0, 5))
    calls = {"n": 0}

    def flaky(conn: sa.Connection, cursor: object, stmt: str, *args: object) -> None:
        if stmt.startswith("INSERT INTO segments") and calls["n"] < 1:
            calls["n"] += 1
            raise sa.exc.OperationalError(stmt, None, RuntimeError("injected"))

    sa.event.listen(store.engine, "before_cursor_execute", flaky)
    try:
        done = store.commit_compaction(lease, outputs=[out])
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", flaky)
    assert calls["n"] == 1 and done.output_file_ids == (out.file_id,)
    assert store.get_job(lease.job_id).state == "committed"


def test_unknown_job_is_a_specific_error(store: MetadataStore) -> None:
    with pytest.raises(UnknownJobError):
        store.get_job(12345)


# ------------------------------------------------------------------ release and GC


def test_release_frees_the_files_for_another_job(store: MetadataStore) -> None:
    f1, f2, f3 = three_files(store)
    a = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    with pytest.raises(JobConflictError):
        store.lease_job("b", [f2, f3], owner="w2", lease_ms=LEASE_MS)
    with pytest.raises(ValueError):
        store.release_job(a, state="committed")
    store.release_job(a, state="failed", result={"error": "boom"})
    job = store.get_job(a.job_id)
    assert (job.state, job.result) == ("failed", {"error": "boom"})
    assert not any(f.leased or f.job_id for f in store.snapshot().files)
    b = store.lease_job("b", [f2, f3], owner="w2", lease_ms=LEASE_MS)
    store.release_job(a)  # already over: no error, and b keeps f2
    assert store.get_file(f2).job_id == b.job_id
    with pytest.raises(StaleLeaseError):
        store.commit_compaction(a, outputs=[])
    store.release_job(b, state="abandoned")
    again = store.lease_job("a", [f1, f2], owner="w3", lease_ms=LEASE_MS)  # a new job
    assert again.job_id not in (a.job_id, b.job_id) and again.fence == 1
    assert [j.state for j in store.list_jobs()] == ["failed", "abandoned", "leased"]


def test_retired_files_are_collected_only_after_the_grace(store: MetadataStore,
                                                          clock: ManualClock) -> None:
    f1, f2, _ = three_files(store)
    lease = store.lease_job("a", [f1, f2], owner="w1", lease_ms=LEASE_MS)
    out = output(store, "out", oseg("t", 0, 0, 5), oseg("t", 1, 0, 1))
    store.commit_compaction(lease, outputs=[out])
    retired_at = clock.now_ms()

    def due() -> list[tuple[int, str]]:
        return [(f.id, f.state) for f in store.files_to_gc(clock.now_ms() - GRACE_MS)]

    assert due() == []
    clock.advance(GRACE_MS - 1)
    assert due() == []
    assert store.files_to_gc(retired_at - 1) == []
    clock.advance(1)
    assert due() == [(f1, "retired"), (f2, "retired")]
    # The GC protocol: mark deleting, delete the objects, mark deleted.
    assert store.mark_deleting([f1, f2, out.file_id]) == [f1, f2]
    assert [(f.id, f.state) for f in store.files_to_gc(clock.now_ms())] == [
        (f1, "deleting"), (f2, "deleting")]
    assert store.mark_deleted([f1, f2]) == [f1, f2]
    assert store.files_to_gc(clock.now_ms()) == []
    assert store.get_file(f1).state == "deleted"
    assert store.get_file(out.file_id).state == "live"
    assert len(store.find_segments("t", 0, 0)) == 2


# ------------------------------------------------------------------ concurrency


@pytest.mark.parametrize("lease_ms", [60_000, 0], ids=["long-lease", "instant-expiry"])
def test_racing_workers_commit_a_job_exactly_once(metadata_url: str, lease_ms: int) -> None:
    """Workers on their own handles lease and commit the same spec; with instant expiry
    every lease can be taken over mid-commit, so fencing is what keeps it to one commit."""
    workers = 6
    setup = MetadataStore.open(metadata_url, create=True)
    inputs = three_files(setup)
    setup.close()
    barrier = threading.Barrier(workers)
    outcomes: list[tuple[int, str, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        md = MetadataStore.open(metadata_url, create=True)
        try:
            out = output(md, f"out-{w}", oseg("t", 0, 0, 8, 3), oseg("t", 1, 0, 1))
            barrier.wait()
            for _ in range(50):
                try:
                    lease = md.lease_job("spec", inputs, owner=f"w{w}", lease_ms=lease_ms)
                except JobLeasedError:
                    time.sleep(0.001)
                    continue
                except JobConflictError:
                    result = "conflict"
                    break
                try:
                    md.commit_compaction(lease, outputs=[out], result={"worker": w})
                except (StaleLeaseError, CommitConflictError):
                    continue
                result = "committed"
                break
            else:
                result = "gave up"
            if result != "committed":
                md.abandon_file(out.file_id)
            with lock:
                outcomes.append((w, result, out.file_id))
        except BaseException as exc:
            errors.append(exc)
        finally:
            md.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    winners = [(w, fid) for w, r, fid in outcomes if r == "committed"]
    assert len(winners) == 1, outcomes
    (winner, out_id), = winners
    md = MetadataStore.open(metadata_url, create=True)
    try:
        (job,) = md.list_jobs()
        assert (job.state, job.result) == ("committed", {"worker": winner})
        assert [md.get_file(f).state for f in inputs] == ["retired"] * 3
        assert [(x.file_id, x.base_offset, x.last_offset)
                for x in md.find_segments("t", 0, 0)] == [(out_id, 0, 8)]
        assert [f.id for f in md.snapshot().files] == [out_id]
    finally:
        md.close()


def test_lease_and_commit_on_separate_handles_see_each_other(metadata_url: str) -> None:
    """Two handles on one database: a commit on one refuses the other's stale lease."""
    clock = ManualClock()
    one = MetadataStore.open(metadata_url, clock=clock, create=True)
    two = MetadataStore.open(metadata_url, clock=clock, create=True)
    try:
        f1, f2, _ = three_files(one)
        old = one.lease_job("s", [f1, f2], owner="a", lease_ms=10)
        clock.advance(10)
        new = two.lease_job("s", [f1, f2], owner="b", lease_ms=10)
        two.commit_compaction(new, outputs=[output(two, "o", oseg("t", 0, 0, 5))])
        stale = Lease(old.job_id, "s", old.fence, "a", old.input_file_ids, old.expires_ms)
        with pytest.raises(StaleLeaseError):
            one.commit_compaction(stale, outputs=[output(one, "p", oseg("t", 0, 0, 5))])
    finally:
        one.close()
        two.close()
