"""Size-tiered triggers fire at their thresholds and not before; bin-packing; kinds."""

from __future__ import annotations

import pytest

from planner import PlannerConfig, Trigger, propose
from planner.errors import InvalidPlannerConfigError
from planner.model import L0_MAX_AGE_MS, L0_TRIGGER_FILES, LEVEL_MAX_AGE_MS

from .helpers import NOW, file, l0_files, seg, snapshot

MIB = 1024 * 1024
YOUNG = NOW - 1_000


def test_l0_file_count_default_is_32() -> None:
    assert propose(snapshot(*l0_files(31, created=YOUNG)), NOW).jobs == []
    plan = propose(snapshot(*l0_files(32, created=YOUNG)), NOW)
    assert [j.trigger for j in plan.jobs] == [Trigger.FILE_COUNT]
    assert plan.jobs[0].input_file_ids == tuple(range(1, 33))
    assert plan.jobs[0].output_level == 1


def test_l0_bytes_trigger() -> None:
    cfg = PlannerConfig(l0_trigger_bytes=3000)
    assert propose(snapshot(*l0_files(2, created=YOUNG, size=1499)), NOW, cfg).jobs == []
    plan = propose(snapshot(*l0_files(2, created=YOUNG, size=1500)), NOW, cfg)
    assert [j.trigger for j in plan.jobs] == [Trigger.BYTES]
    assert plan.jobs[0].input_bytes == 3000


def test_l0_age_trigger_at_30_s_even_for_one_file() -> None:
    assert propose(snapshot(*l0_files(1, created=NOW - 29_999)), NOW).jobs == []
    plan = propose(snapshot(*l0_files(1, created=NOW - 30_000)), NOW)
    assert [j.trigger for j in plan.jobs] == [Trigger.AGE]


def test_waiting_says_what_l0_waits_for() -> None:
    plan = propose(snapshot(*l0_files(3, created=NOW - 12_000, size=MIB)), NOW)
    assert plan.waiting == [
        "L0: 3 files, 3.0 MiB; triggers at 32 files / 64 MiB / oldest 30 s (now 12.0 s)"]


def test_upper_level_fan_out_and_lone_files() -> None:
    cfg = PlannerConfig(level_trigger_files=3)
    two = [file(i, seg(i, "d", i * 10, i * 10 + 9), level=1) for i in range(2)]
    assert propose(snapshot(*two), NOW, cfg).jobs == []
    three = [*two, file(2, seg(2, "d", 20, 29), level=1)]
    plan = propose(snapshot(*three), NOW, cfg)
    assert [(j.trigger, j.output_level) for j in plan.jobs] == [(Trigger.FILE_COUNT, 2)]
    # One big file alone above L0 is never rewritten just to move it up.
    big = file(1, seg(1, "d", 0, 9, size=10**9), level=1)
    assert propose(snapshot(big), NOW, cfg).jobs == []


def test_upper_level_age_trigger_only_when_configured() -> None:
    files = [file(i, seg(i, "d", i * 10, i * 10 + 9), level=1, created=NOW - 60_000)
             for i in range(2)]
    assert propose(snapshot(*files), NOW).jobs == []
    cfg = PlannerConfig(level_max_age_ms=60_001)
    assert propose(snapshot(*files), NOW, cfg).jobs == []
    cfg = PlannerConfig(level_max_age_ms=60_000)
    assert [j.trigger for j in propose(snapshot(*files), NOW, cfg).jobs] == [Trigger.AGE]


def test_max_level_files_are_not_merged_by_size() -> None:
    cfg = PlannerConfig(max_level=2, level_trigger_files=2)
    files = [file(i, seg(i, "d", i * 10, i * 10 + 9), level=2) for i in range(5)]
    assert propose(snapshot(*files), NOW, cfg).jobs == []
    # Merges into the top level stay there.
    files = [file(i, seg(i, "d", i * 10, i * 10 + 9), level=1) for i in range(2)]
    assert [j.output_level for j in propose(snapshot(*files), NOW, cfg).jobs] == [2]


def test_bin_packing_to_the_target_size() -> None:
    cfg = PlannerConfig(l0_trigger_files=6, target_file_bytes=2000)
    # Six files, one partition each, so contiguity does not glue the bins together.
    files = [file(i, seg(i, "d", 0, 9, part=i), created=YOUNG) for i in range(1, 7)]
    plan = propose(snapshot(*files), NOW, cfg)
    assert [j.input_file_ids for j in plan.jobs] == [(1, 2), (3, 4), (5, 6)]
    assert len({j.spec_id for j in plan.jobs}) == 3


def test_compacted_and_delete_files_merge_separately_above_l0() -> None:
    cfg = PlannerConfig(level_trigger_files=2)
    comp = [file(i, seg(i, "c", i * 10, i * 10 + 9), level=1) for i in (1, 2)]
    dele = [file(i, seg(i, "d", i * 10, i * 10 + 9), level=1) for i in (3, 4)]
    plan = propose(snapshot(*comp, *dele), NOW, cfg)
    assert sorted(j.input_file_ids for j in plan.jobs) == [(1, 2), (3, 4)]
    assert {len(j.partitions) for j in plan.jobs} == {0, 1}  # delete data needs no plan


def test_l0_files_may_hold_both_kinds() -> None:
    mixed = [file(i, seg(i, "c", i * 10, i * 10 + 9), seg(i, "d", i * 10, i * 10 + 9),
                  created=NOW - 30_000) for i in (1, 2)]
    (job,) = propose(snapshot(*mixed), NOW).jobs
    assert job.input_file_ids == (1, 2)
    assert [(p.topic, p.partition) for p in job.partitions] == [("c", 0)]


def test_config_validation_and_settings_by_name() -> None:
    with pytest.raises(InvalidPlannerConfigError):
        PlannerConfig(l0_trigger_files=0)
    with pytest.raises(ValueError, match=r"level\.trigger\.files"):
        PlannerConfig(level_trigger_files=1)
    cfg = PlannerConfig.from_map({L0_TRIGGER_FILES: "8", L0_MAX_AGE_MS: 5,
                                  LEVEL_MAX_AGE_MS: None})
    assert (cfg.l0_trigger_files, cfg.l0_max_age_ms, cfg.level_max_age_ms) == (8, 5, None)
    with pytest.raises(InvalidPlannerConfigError, match="unknown"):
        PlannerConfig.from_map({"l0.trigger.filez": 1})
    with pytest.raises(InvalidPlannerConfigError, match="must be an integer"):
        PlannerConfig.from_map({L0_TRIGGER_FILES: "many"})
