"""`next_change`: the first instant at which the plan changes with no new data, and why."""

from __future__ import annotations

from planner import PlannerConfig, next_change, propose

from .helpers import NOW, file, l0_files, seg, snapshot

CONFIG = PlannerConfig(l0_trigger_files=32, l0_max_age_ms=30_000)


def test_young_l0_files_change_when_the_oldest_turns_max_age() -> None:
    snap = snapshot(*l0_files(3, created=NOW - 10_000))
    assert propose(snap, NOW, CONFIG).jobs == []
    change = next_change(snap, NOW, CONFIG)
    assert change is not None
    assert change.at_ms == NOW - 10_000 + 30_000
    assert change.reason == "L0 file 1 turns 30 s old"
    assert propose(snap, change.at_ms - 1, CONFIG).jobs == []
    assert len(propose(snap, change.at_ms, CONFIG).jobs) == 1


def test_no_change_once_every_trigger_has_fired() -> None:
    snap = snapshot(*l0_files(3, created=NOW - 100_000))
    assert len(propose(snap, NOW, CONFIG).jobs) == 1
    assert next_change(snap, NOW, CONFIG) is None
    assert next_change(snapshot(), NOW, CONFIG) is None


def test_max_compaction_lag_of_a_compacted_partition() -> None:
    # "forced": dirty ratio never reached (0.99), max.compaction.lag.ms = 10 s. Two cleaned
    # L1 files and one dirty L1 file whose data is 4 s old.
    snap = snapshot(
        file(1, seg(1, "forced", 0, 9, cleaned=NOW - 50_000, created=NOW - 60_000),
             level=1, created=NOW - 60_000),
        file(2, seg(2, "forced", 10, 19, cleaned=NOW - 50_000, created=NOW - 60_000),
             level=1, created=NOW - 60_000),
        file(3, seg(3, "forced", 20, 29, created=NOW - 4_000), level=1, created=NOW - 4_000),
        clean={("forced", 0): 20},
    )
    assert propose(snap, NOW, CONFIG).jobs == []
    change = next_change(snap, NOW, CONFIG)
    assert change is not None
    assert change.at_ms == NOW - 4_000 + 10_000
    assert "max.compaction.lag.ms=10000" in change.reason
    jobs = propose(snap, change.at_ms, CONFIG).jobs
    assert [j.trigger.value for j in jobs] == ["max_compaction_lag"]


def test_a_threshold_that_changes_no_job_is_skipped() -> None:
    # The L0 age trigger has fired already (the oldest file is old), so the young file
    # turning 30 s old changes nothing: it is in the job already.
    snap = snapshot(*l0_files(2, created=NOW - 100_000),
                    file(9, seg(9, "d", 0, 9, part=1), created=NOW - 5_000))
    now_jobs = propose(snap, NOW, CONFIG).jobs
    assert len(now_jobs) == 1 and 9 in now_jobs[0].input_file_ids
    assert next_change(snap, NOW, CONFIG) is None
