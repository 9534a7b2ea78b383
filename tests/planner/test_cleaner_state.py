"""`planner.cleaner_state`: the compactor's dirty-ratio and compaction-lag gauges weigh what
the planner weighs (below the first uncleanable offset, fresh L0 files left out)."""

from __future__ import annotations

from planner import PlannerConfig, TopicCleaning, cleaner_state

from .helpers import NOW, file, seg, snapshot


def test_per_compacted_topic_max_ratio_and_oldest_dirty_age() -> None:
    snap = snapshot(
        # c/0: 1000 clean + 3000 dirty bytes (100 s old) -> 0.75
        file(1, seg(1, "c", 0, 9, cleaned=NOW - 50_000), seg(1, "c", 0, 9, part=1,
                                                             cleaned=NOW - 50_000), level=1),
        file(2, seg(2, "c", 10, 19, size=3000, created=NOW - 100_000)),
        # c/1: 1000 clean + 1000 dirty bytes, 200 s old -> 0.5, the oldest dirty record
        file(3, seg(3, "c", 10, 19, part=1, created=NOW - 200_000), created=NOW - 200_000),
        # a fresh L0 file (Kafka's active segment) weighs nothing, however dirty
        file(4, seg(4, "c", 20, 29, size=100_000, created=NOW - 1_000), created=NOW - 1_000),
        # delete-policy data, and a compacted topic with nothing dirty
        file(5, seg(5, "d", 0, 9, created=NOW - 500_000)),
        file(6, seg(6, "tomb", 0, 9, cleaned=NOW - 10), level=1),
    )
    state = cleaner_state(snap, NOW, PlannerConfig())
    assert state["c"] == TopicCleaning(0.75, 200_000)
    assert state["tomb"] == TopicCleaning(0.0, 0)
    assert state["lag"] == state["forced"] == TopicCleaning(0.0, 0)  # compacted, no data
    assert "d" not in state
