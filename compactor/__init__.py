"""The compactor: merges files with Kafka's two-pass dedupe, two streams per input file."""

from .config import CompactorConfig
from .dedupe import DEFAULT_MEMORY_BUDGET, MAP_BYTES_PER_KEY, dedupe
from .errors import CompactorError
from .merge import MergeStats
from .worker import Compactor, JobReport

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MAP_BYTES_PER_KEY",
    "Compactor",
    "CompactorConfig",
    "CompactorError",
    "JobReport",
    "MergeStats",
    "dedupe",
]
