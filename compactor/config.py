"""Compaction worker settings (the `compactor` section). Declared once here; loaded by
`settings.load`, which also builds the planner thresholds from the `planner` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from fileformat import WRITABLE_COMPRESSIONS, Compression
from planner import PlannerConfig
from settings import Section, choice, integer, number

from .dedupe import DEFAULT_MEMORY_BUDGET

MEMORY_BUDGET = "memory.budget"
LEASE_MS = "lease.ms"
FILE_DELETE_DELAY_MS = "file.delete.delay.ms"
POLL_INTERVAL_S = "poll.interval.s"
COMPRESSION_TYPE = "compression.type"


@dataclass(frozen=True, slots=True)
class CompactorConfig(Section):
    """Worker settings: the offset map's memory budget per job, how long a job's lease lasts
    (renewed every third of it), how long replaced files stay readable before GC deletes
    them (Kafka's file.delete.delay.ms), how often the worker loop polls, output codec."""

    SECTION: ClassVar[str] = "compactor"

    memory_budget: int = integer(MEMORY_BUDGET, DEFAULT_MEMORY_BUDGET, lo=1)
    lease_ms: int = integer(LEASE_MS, 60_000, lo=1)
    grace_ms: int = integer(FILE_DELETE_DELAY_MS, 60_000, lo=0)
    poll_interval_s: float = number(POLL_INTERVAL_S, 5.0, above=0)
    compression: Compression = choice(COMPRESSION_TYPE, Compression.NONE, WRITABLE_COMPRESSIONS)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
