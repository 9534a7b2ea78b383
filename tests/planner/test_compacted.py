"""Kafka's cleaner rules for compacted partitions: dirty ratio, lags, whole log, tombstones."""

from __future__ import annotations

from dataclasses import replace

from planner import PlannerConfig, Trigger, propose, propose_all
from planner.model import LONG_MAX

from .helpers import NOW, file, seg, snapshot


def test_dirty_ratio_fires_above_not_at_the_threshold() -> None:
    clean = file(1, seg(1, "c", 0, 99, size=1000, cleaned=NOW - 5), level=1)
    equal = file(2, seg(2, "c", 100, 109, size=1000), level=1)
    plan = propose(snapshot(clean, equal), NOW)
    assert plan.jobs == []  # 0.5 is not > 0.5 (Kafka compares strictly)
    assert any("cleanable ratio 0.50" in w for w in plan.waiting)
    dirtier = file(2, seg(2, "c", 100, 109, size=1001), level=1)
    (job,) = propose(snapshot(clean, dirtier), NOW).jobs
    assert job.trigger == Trigger.DIRTY_RATIO and job.input_file_ids == (1, 2)
    (pp,) = job.partitions
    assert pp.whole_log and pp.dedupe and pp.dirty_start_offset == 100


def test_dirtiest_partition_first_and_shared_files_are_not_reused() -> None:
    # p0: ratio 2/3, p1: ratio 1.0, in separate files -> two jobs, p1 first.
    p0 = [file(1, seg(1, "c", 0, 9, cleaned=NOW - 5), level=1),
          file(2, seg(2, "c", 10, 19, size=2000), level=1)]
    p1 = [file(3, seg(3, "c", 0, 9, part=1), level=1)]
    plan = propose(snapshot(*p0, *p1), NOW)
    assert [j.input_file_ids for j in plan.jobs] == [(3,), (1, 2)]
    assert [j.trigger for j in plan.jobs] == [Trigger.DIRTY_RATIO] * 2
    # A file shared by both: the dirtiest gets it; the other waits for the next round.
    shared = [file(1, seg(1, "c", 0, 9, cleaned=NOW - 5), level=1),
              file(2, seg(2, "c", 10, 19, size=2000), seg(3, "c", 0, 9, part=1), level=1)]
    plan = propose(snapshot(*shared), NOW)
    (job,) = plan.jobs
    assert job.input_file_ids == (2,) and "c/1" in job.reason
    assert [(p.partition, p.whole_log) for p in job.partitions] == [(0, False), (1, True)]
    assert any(w.startswith("c/0") and "proposed above" in w for w in plan.waiting)


def test_fresh_l0_data_is_the_active_segment() -> None:
    clean = file(1, seg(1, "c", 0, 99, size=1000, cleaned=NOW - 5), level=1)
    fresh = file(2, seg(2, "c", 100, 199, size=5000), created=NOW - 29_999)
    assert propose(snapshot(clean, fresh), NOW).jobs == []
    # Once out of its age window it counts (and the L0 age trigger fires as well).
    settled = file(2, seg(2, "c", 100, 199, size=5000), created=NOW - 30_000)
    (job,) = propose(snapshot(clean, settled), NOW).jobs
    assert job.trigger == Trigger.DIRTY_RATIO and job.input_file_ids == (1, 2)


def test_max_compaction_lag_forces_a_clean_below_the_ratio() -> None:
    clean = file(1, seg(1, "forced", 0, 99, size=10_000, cleaned=NOW - 5), level=1)
    young = file(2, seg(2, "forced", 100, 109, size=100, created=NOW - 9_999), level=1)
    assert propose(snapshot(clean, young), NOW).jobs == []
    old = file(2, seg(2, "forced", 100, 109, size=100, created=NOW - 10_000), level=1)
    (job,) = propose(snapshot(clean, old), NOW).jobs
    assert job.trigger == Trigger.MAX_COMPACTION_LAG and job.partitions[0].whole_log


def test_max_compaction_lag_dates_dirty_data_by_its_first_timestamp() -> None:
    clean = file(1, seg(1, "forced", 0, 99, size=10_000, cleaned=NOW - 5), level=1)
    s = replace(seg(2, "forced", 100, 109, size=100, created=NOW - 1),
                min_timestamp=NOW - 10_000)
    (job,) = propose(snapshot(clean, file(2, s, level=1)), NOW).jobs
    assert job.trigger == Trigger.MAX_COMPACTION_LAG


def test_whole_log_clean_waits_for_a_leased_file() -> None:
    leased = file(1, seg(1, "c", 0, 9, cleaned=NOW - 5), level=1, leased=True)
    dirty = file(2, seg(2, "c", 10, 19, size=5000), level=1)
    plan = propose(snapshot(leased, dirty), NOW)
    assert plan.jobs == []
    assert any("c/0" in w and "[1]" in w and "running jobs" in w for w in plan.waiting)


def test_min_compaction_lag_keeps_recent_offsets_out() -> None:
    old = file(1, seg(1, "lag", 0, 9, max_ts=NOW - 60_000))
    young = file(2, seg(2, "lag", 10, 19, max_ts=NOW - 59_999))
    (job,) = propose_all(snapshot(old, young), NOW).jobs
    (pp,) = job.partitions
    assert pp.clean_upto_offset == 10 and pp.dedupe
    # Everything young: nothing to dedupe.
    (job,) = propose_all(snapshot(young), NOW).jobs
    assert job.partitions[0].clean_upto_offset == 10 and not job.partitions[0].dedupe


def test_a_recent_clean_segment_does_not_block_the_dirty_data_after_it() -> None:
    # A whole-log clean output holds recent records, but it is clean: Kafka looks at the
    # dirty segments only.
    cleaned = file(1, seg(1, "lag", 0, 9, max_ts=NOW - 1, cleaned=NOW - 1), level=1)
    dirty = file(2, seg(2, "lag", 10, 19, max_ts=NOW - 70_000), level=1)
    (job,) = propose_all(snapshot(cleaned, dirty), NOW).jobs
    assert job.partitions[0].clean_upto_offset == 20


def test_no_min_lag_cleans_up_to_the_log_end() -> None:
    f = file(1, seg(1, "c", 0, 9, max_ts=NOW))
    (job,) = propose_all(snapshot(f), NOW).jobs
    assert job.partitions[0].clean_upto_offset == 10


def test_whole_log_only_when_the_job_holds_the_log_start() -> None:
    cfg = PlannerConfig(level_trigger_files=2)
    head = file(1, seg(1, "c", 0, 9, cleaned=NOW - 5, size=100_000), level=2)
    mid = [file(i, seg(i, "c", i * 10, i * 10 + 9), level=1) for i in (2, 3)]
    (job,) = propose(snapshot(head, *mid), NOW, cfg).jobs
    assert job.input_file_ids == (2, 3)
    (pp,) = job.partitions
    assert not pp.whole_log and pp.dedupe
    # With the head in the job: every live segment from the log start.
    (job,) = propose_all(snapshot(head, *mid), NOW).jobs
    assert job.partitions[0].whole_log


def test_tombstones_drop_after_delete_retention_only_in_whole_log_jobs() -> None:
    def snap(cleaned_at: int, *, with_head: bool = True) -> list[frozenset[int]]:
        head = file(1, seg(1, "tomb", 0, 9, cleaned=NOW - 10**6), level=1,
                    leased=not with_head)
        t = file(2, seg(2, "tomb", 10, 19, cleaned=cleaned_at, tombstones=3), level=1)
        young = file(3, seg(3, "tomb", 20, 29), level=1)
        return [p.tombstone_drop_segment_ids
                for j in propose_all(snapshot(head, t, young, clean={("tomb", 0): 20}),
                                     NOW).jobs
                for p in j.partitions]

    (early,) = snap(NOW - 999)
    assert early == frozenset()
    (due,) = snap(NOW - 1_000)
    assert len(due) == 1
    # Without the log head (held by a running job) the job is not whole-log: they stay.
    (partial,) = snap(NOW - 10**6, with_head=False)
    assert partial == frozenset()


def test_tombstones_above_the_first_uncleanable_offset_stay() -> None:
    t = file(1, seg(1, "lag", 0, 9, cleaned=NOW - 10**9, tombstones=1, max_ts=NOW - 1))
    d = file(2, seg(2, "lag", 10, 19, max_ts=NOW - 1))
    (job,) = propose_all(snapshot(t, d, clean={("lag", 0): 0}), NOW).jobs
    (pp,) = job.partitions
    assert pp.clean_upto_offset == 0 and pp.tombstone_drop_segment_ids == frozenset()


def test_delete_partitions_have_no_plan() -> None:
    (job,) = propose_all(snapshot(file(1, seg(1, "d", 0, 9)), file(2, seg(2, "d", 10, 19))),
                         NOW).jobs
    assert job.partitions == ()


def test_never_clean_lag_is_long_max() -> None:
    clean = file(1, seg(1, "c", 0, 99, size=10_000, cleaned=0), level=1)
    old = file(2, seg(2, "c", 100, 109, size=1, created=-(2**62)), level=1)
    assert propose(snapshot(clean, old), NOW).jobs == []
    assert LONG_MAX == 2**63 - 1
