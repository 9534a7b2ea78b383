"""agent.tune_gc: start-up objects frozen, the young generation's threshold raised."""

from __future__ import annotations

import gc

from agent import tune_gc
from agent.runtime import GC_THRESHOLDS


def test_tune_gc_freezes_startup_objects_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    survivor = [object()]  # alive before the call: must end up frozen
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > before[0]
        assert gc.get_freeze_count() > 0
        assert not any(o is survivor for o in gc.get_objects())  # out of every generation
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
    assert any(o is survivor for o in gc.get_objects())
