"""The planner is pure: snapshots built by hand, a controllable clock, no I/O."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner import (
    FileView,
    PartitionState,
    PlannerConfig,
    SegmentView,
    Snapshot,
    TopicPolicy,
    Trigger,
    propose,
    propose_all,
    spec_id_of,
    validate,
)

NOW = 1_000_000_000
TOPICS = {
    "c": TopicPolicy("c", compacted=True),
    "d": TopicPolicy("d", compacted=False),
    "lag": TopicPolicy("lag", compacted=True, min_compaction_lag_ms=60_000),
    "forced": TopicPolicy("forced", compacted=True, min_cleanable_dirty_ratio=0.99,
                          max_compaction_lag_ms=10_000),
}
_seg_ids = iter(range(1, 10**9))


def seg(fid: int, topic: str, base: int, last: int, *, size: int = 1000,
        cleaned: int | None = None, created: int = NOW - 100_000, max_ts: int | None = None,
        tombstones: int = 0) -> SegmentView:
    return SegmentView(next(_seg_ids), fid, topic, 0, base, last, size, last - base + 1,
                       tombstones, created if max_ts is None else max_ts, created, cleaned)


def file(fid: int, *segs: SegmentView, level: int = 0, created: int = NOW - 100_000,
         leased: bool = False) -> FileView:
    return FileView(fid, level, sum(s.size_bytes for s in segs), created,
                    any(TOPICS[s.topic].compacted for s in segs), leased, segs)


def snapshot(*files: FileView) -> Snapshot:
    """Partition states derived from the segments; the cleaner checkpoint sits after the
    last segment that a whole-log clean produced."""
    nxt: dict[tuple[str, int], int] = {}
    clean: dict[tuple[str, int], int] = {}
    for f in files:
        for s in f.segments:
            nxt[s.tp] = max(nxt.get(s.tp, 0), s.last_offset + 1)
            if s.cleaned_at_ms is not None:
                clean[s.tp] = max(clean.get(s.tp, 0), s.last_offset + 1)
    parts = {tp: PartitionState(tp[0], tp[1], 0, n, clean.get(tp, 0)) for tp, n in nxt.items()}
    return Snapshot(TOPICS, parts, tuple(files))


def l0_files(n: int, *, created: int, topic: str = "d", start_id: int = 1) -> list[FileView]:
    return [file(start_id + i, seg(start_id + i, topic, i * 10, i * 10 + 9), created=created)
            for i in range(n)]


def test_l0_file_count_trigger_fires_at_threshold_not_before() -> None:
    cfg = PlannerConfig(l0_trigger_files=4, l0_max_age_ms=10**9)
    young = NOW - 1000
    assert propose(snapshot(*l0_files(3, created=young)), NOW, cfg).jobs == []
    plan = propose(snapshot(*l0_files(4, created=young)), NOW, cfg)
    assert [j.trigger for j in plan.jobs] == [Trigger.FILE_COUNT]
    assert plan.jobs[0].input_file_ids == (1, 2, 3, 4) and plan.jobs[0].output_level == 1


def test_l0_age_trigger() -> None:
    cfg = PlannerConfig(l0_max_age_ms=30_000)
    assert propose(snapshot(*l0_files(2, created=NOW - 29_999)), NOW, cfg).jobs == []
    plan = propose(snapshot(*l0_files(2, created=NOW - 30_000)), NOW, cfg)
    assert [j.trigger for j in plan.jobs] == [Trigger.AGE]
    assert any("L0" in w for w in propose(snapshot(*l0_files(1, created=NOW)), NOW,
                                          cfg).waiting)


def test_leased_files_are_never_proposed_and_block_contiguous_jobs() -> None:
    files = l0_files(3, created=NOW - 10**6)
    leased = file(2, *files[1].segments, leased=True)
    plan = propose(snapshot(files[0], leased, files[2]), NOW, PlannerConfig())
    # Files 1 and 3 need file 2 in between for contiguity: nothing may run.
    assert plan.jobs == []
    assert any("held by running jobs" in w for w in plan.waiting)


def test_contiguity_closure_pulls_in_files_between() -> None:
    f1 = file(1, seg(1, "d", 0, 9), level=1, created=NOW)
    f2 = file(2, seg(2, "d", 10, 19), level=2, created=NOW)  # another level, in between
    f3 = file(3, seg(3, "d", 20, 29), level=1, created=NOW)
    cfg = PlannerConfig(level_trigger_files=2)
    plan = propose(snapshot(f1, f2, f3), NOW, cfg)
    assert plan.jobs and set(plan.jobs[0].input_file_ids) == {1, 2, 3}
    assert validate(plan.jobs[0], snapshot(f1, f2, f3)) == []


def test_dirty_ratio_whole_log_job_and_clean_partition_waits() -> None:
    clean = file(1, seg(1, "c", 0, 99, size=10_000, cleaned=NOW - 5), level=1)
    dirty = file(2, seg(2, "c", 100, 109, size=1_000), level=1)
    plan = propose(snapshot(clean, dirty), NOW, PlannerConfig())
    assert plan.jobs == []  # ratio 1000/11000 < 0.5
    dirtier = file(2, seg(2, "c", 100, 199, size=20_000), level=1)
    plan = propose(snapshot(clean, dirtier), NOW, PlannerConfig())
    assert [j.trigger for j in plan.jobs] == [Trigger.DIRTY_RATIO]
    (pp,) = plan.jobs[0].partitions
    assert pp.whole_log and pp.topic == "c"


def test_max_compaction_lag_forces_a_clean_below_the_ratio() -> None:
    clean = file(1, seg(1, "forced", 0, 99, size=10_000, cleaned=NOW - 5), level=1)
    old_dirty = file(2, seg(2, "forced", 100, 109, size=100, created=NOW - 20_000), level=1)
    plan = propose(snapshot(clean, old_dirty), NOW, PlannerConfig())
    assert [j.trigger for j in plan.jobs] == [Trigger.MAX_COMPACTION_LAG]


def test_min_compaction_lag_sets_first_uncleanable_offset() -> None:
    old = file(1, seg(1, "lag", 0, 9, max_ts=NOW - 120_000))
    young = file(2, seg(2, "lag", 10, 19, max_ts=NOW - 1_000))
    plan = propose_all(snapshot(old, young), NOW)
    (pp,) = plan.jobs[0].partitions
    assert pp.clean_upto_offset == 10


def test_whole_log_only_when_every_live_segment_is_in_the_job() -> None:
    cfg = PlannerConfig(l0_trigger_files=2, target_file_bytes=1500)
    f1 = file(1, seg(1, "c", 0, 9), created=NOW - 10, level=0)
    f2 = file(2, seg(2, "d", 0, 9), created=NOW - 9, level=0)
    f3 = file(3, seg(3, "c", 10, 19), level=1, created=NOW)
    plan = propose(snapshot(f1, f2, f3), NOW, cfg)
    for job in plan.jobs:
        for pp in job.partitions:
            assert pp.whole_log == (1 in job.input_file_ids)  # holds the log start


def test_propose_all_covers_everything_and_is_deterministic() -> None:
    files = [*l0_files(3, created=NOW, topic="c"), *l0_files(2, created=NOW, start_id=10)]
    a = propose_all(snapshot(*files), NOW)
    b = propose_all(snapshot(*files), NOW)
    assert len(a.jobs) == 1 and a.jobs[0].trigger == Trigger.FORCED_ALL
    assert set(a.jobs[0].input_file_ids) == {f.file_id for f in files}
    assert a.jobs[0].spec_id == b.jobs[0].spec_id == spec_id_of(
        a.jobs[0].input_file_ids, a.jobs[0].output_level)
    assert all(pp.whole_log for pp in a.jobs[0].partitions)


def test_validate_reports_changed_inputs() -> None:
    files = l0_files(2, created=NOW - 10**6)
    job = propose_all(snapshot(*files), NOW).jobs[0]
    assert validate(job, snapshot(files[0])) == ["file 2 is no longer live"]
    leased = file(2, *files[1].segments, leased=True)
    assert "held by another job" in validate(job, snapshot(files[0], leased))[0]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["c", "d"]), st.integers(1, 5), st.integers(0, 2),
                          st.booleans(), st.integers(0, 100_000)), min_size=1, max_size=25))
def test_jobs_never_overlap_nor_touch_leased_files(
        spec: list[tuple[str, int, int, bool, int]]) -> None:
    offsets: dict[str, int] = {"c": 0, "d": 0}
    files = []
    for i, (topic, n, level, leased, age) in enumerate(spec, 1):
        base = offsets[topic]
        offsets[topic] += n
        files.append(file(i, seg(i, topic, base, base + n - 1), level=level, leased=leased,
                          created=NOW - age))
    snap = snapshot(*files)
    cfg = PlannerConfig(l0_trigger_files=2, level_trigger_files=2, target_file_bytes=3000)
    for plan in (propose(snap, NOW, cfg), propose_all(snap, NOW, cfg)):
        seen: set[int] = set()
        for job in plan.jobs:
            ids = set(job.input_file_ids)
            assert not ids & seen
            seen |= ids
            assert not any(f.leased for f in files if f.file_id in ids)
            assert validate(job, snap) == []
