"""Compaction worker settings (the `compactor` section). Declared once here; loaded by
`settings.load`, which also builds the planner thresholds from the `planner` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from fileformat import PRODUCER, TOPIC_COMPRESSIONS, Compression
from planner import PlannerConfig
from settings import choice, integer, number
from telemetry import MetricsPortSettings
from telemetry import config as metrics

from .dedupe import DEFAULT_MEMORY_BUDGET

MEMORY_BUDGET = "memory.budget"
LEASE_MS = "lease.ms"
FILE_DELETE_DELAY_MS = "file.delete.delay.ms"
POLL_INTERVAL_S = "poll.interval.s"
RETENTION_CHECK_INTERVAL_MS = "retention.check.interval.ms"
GC_INTERVAL_MS = "gc.interval.ms"
SHUTDOWN_TIMEOUT_MS = "shutdown.timeout.ms"
COMPRESSION_TYPE = "compression.type"
# Kafka's broker compression.type values, plus the producer's "none" for "uncompressed".
COMPRESSION_CHOICES = {**{name: name for name in TOPIC_COMPRESSIONS}, "none": "uncompressed"}


@dataclass(frozen=True, slots=True)
class CompactorConfig(MetricsPortSettings):
    """Worker settings: the offset map's memory budget per job (at most budget / 24 B keys;
    pass 1 also keeps up to 8 MiB of key hashes in memory, the rest in a temp file), how
    long a job's lease lasts (renewed every third of it), how long replaced files stay
    readable before GC deletes them (Kafka's file.delete.delay.ms), how often the worker
    loop polls, and the codec of rewritten batches for topics that do not set their own
    `compression.type` (as Kafka's broker-level compression.type is the default of the
    topic's; `producer`: each batch keeps its input codec).

    The service (`silt compactor`, `compactor/service.py`) also applies retention every
    retention.check.interval.ms (Kafka's log.retention.check.interval.ms) and collects
    garbage every gc.interval.ms, on timers of their own, and on SIGTERM gives its current
    job shutdown.timeout.ms to finish before abandoning it."""

    SECTION: ClassVar[str] = "compactor"

    memory_budget: int = integer(
        MEMORY_BUDGET, DEFAULT_MEMORY_BUDGET, lo=1,
        doc="bytes of a job's key -> offset map (at most budget / 24 B keys)")
    lease_ms: int = integer(LEASE_MS, 60_000, lo=1,
                            doc="how long a job's lease lasts (renewed every third of it)")
    grace_ms: int = integer(FILE_DELETE_DELAY_MS, 60_000, lo=0,
                            doc="how long replaced files stay readable before GC deletes them")
    poll_interval_s: float = number(POLL_INTERVAL_S, 5.0, above=0,
                                    doc="seconds between two rounds of `silt compactor`")
    retention_check_interval_ms: int = integer(
        RETENTION_CHECK_INTERVAL_MS, 30_000, lo=1,
        doc="how often `silt compactor` applies retention")
    gc_interval_ms: int = integer(GC_INTERVAL_MS, 30_000, lo=1,
                                  doc="how often `silt compactor` collects garbage")
    shutdown_timeout_ms: int = integer(
        SHUTDOWN_TIMEOUT_MS, 30_000, lo=0,
        doc="on SIGTERM, how long the job under way may finish before it is abandoned")
    compression: str = choice(
        COMPRESSION_TYPE, PRODUCER, COMPRESSION_CHOICES,
        doc="codec of rewritten batches for topics without their own (`producer`: keep each"
            " batch's)")
    # `silt compactor`'s metrics port (telemetry/: /metrics, /healthz, /readyz; "" = none).
    # Its gauges are computed once per round, from the round's own plan.
    metrics_listeners: str = metrics.listeners()
    # Its TLS and basic auth: MetricsPortSettings' (the base class).
    planner: PlannerConfig = field(default_factory=PlannerConfig)

    @property
    def rewrite_codec(self) -> Compression | None:
        """The codec for topics without their own compression.type; None: keep each input's."""
        return TOPIC_COMPRESSIONS[self.compression]
