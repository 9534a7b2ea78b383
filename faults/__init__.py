"""Fault injection for tests and failure drills; the product never imports this package.

It is an installed top-level package so that Spark executors can import what a test ships
to them (e.g. a `CrashOnce` metadata opener passed to `spark.compaction.run_on_spark`).
"""

from .compactor import pause_first_merge
from .errors import InjectedCrash
from .metadata import (
    AFTER_COMMIT,
    BEFORE_COMMIT,
    CrashOnce,
    CrashOnceMetadata,
    UnreachableInTasks,
    kill_after_produce_commit,
)
from .objectstore import GatedStore

__all__ = ["AFTER_COMMIT", "BEFORE_COMMIT", "CrashOnce", "CrashOnceMetadata", "GatedStore",
           "InjectedCrash", "UnreachableInTasks", "kill_after_produce_commit",
           "pause_first_merge"]
