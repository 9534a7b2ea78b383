"""The compactor: merges files with Kafka's two-pass dedupe, two streams per input file.

A job's failures (lost lease, refused commit, store errors) are reported in its JobReport's
`outcome` rather than raised, so one bad job never stops a worker loop; anything else it
raises is a built-in or another package's error (errors.py holds only the signal that
abandons a job when the service stops). `CompactorService` (service.py) is `silt compactor`:
rounds of jobs plus retention and GC on timers of their own.
"""

from .config import CompactorConfig
from .dedupe import DEFAULT_MEMORY_BUDGET, MAP_BYTES_PER_KEY, dedupe, map_capacity
from .merge import MergeStats
from .service import CompactorService
from .worker import Compactor, GarbageReport, JobReport

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MAP_BYTES_PER_KEY",
    "Compactor",
    "CompactorConfig",
    "CompactorService",
    "GarbageReport",
    "JobReport",
    "MergeStats",
    "dedupe",
    "map_capacity",
]
