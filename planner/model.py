"""What the planner sees (a snapshot) and what it proposes (job specs). Plain data, no I/O."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]

# Config names (constants) and defaults. All thresholds are configurable.
L0_TRIGGER_FILES = "l0.trigger.files"
LEVEL_TRIGGER_FILES = "level.trigger.files"
LEVEL_TRIGGER_BYTES = "level.trigger.bytes"
L0_MAX_AGE_MS = "l0.max.age.ms"
TARGET_FILE_BYTES = "target.file.bytes"
MAX_LEVEL = "max.level"


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Size-tiered compaction thresholds.

    A level is merged when it holds `trigger_files` files (32 at L0, as WarpStream),
    `trigger_bytes` bytes, or (L0 only) when its oldest file is `l0_max_age_ms` old, so the
    first dedupe happens within ~30 s even at low traffic. Outputs are bin-packed to
    `target_file_bytes`.
    """

    l0_trigger_files: int = 32
    level_trigger_files: int = 8
    level_trigger_bytes: int = 256 * 1024 * 1024
    l0_max_age_ms: int = 30_000
    target_file_bytes: int = 512 * 1024 * 1024
    max_level: int = 4

    def __post_init__(self) -> None:
        checks = {
            L0_TRIGGER_FILES: self.l0_trigger_files >= 1,
            LEVEL_TRIGGER_FILES: self.level_trigger_files >= 2,
            LEVEL_TRIGGER_BYTES: self.level_trigger_bytes >= 1,
            L0_MAX_AGE_MS: self.l0_max_age_ms >= 0,
            TARGET_FILE_BYTES: self.target_file_bytes >= 1,
            MAX_LEVEL: self.max_level >= 1,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid planner setting(s): {', '.join(bad)}")


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """The Kafka configs that steer compaction of one topic."""

    name: str
    compacted: bool
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    delete_retention_ms: int = 86_400_000


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's log bounds."""

    topic: str
    partition: int
    log_start_offset: int
    next_offset: int
    clean_offset: int = 0  # the cleaner checkpoint


@dataclass(frozen=True, slots=True)
class SegmentView:
    """One live segment: a chunk of a file holding one partition's offset range."""

    segment_id: int
    file_id: int
    topic: str
    partition: int
    base_offset: int
    last_offset: int
    size_bytes: int
    record_count: int
    tombstone_count: int
    max_timestamp: int
    created_at_ms: int
    cleaned_at_ms: int | None  # set by a whole-log clean; None = dirty (Kafka's checkpoint)

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class FileView:
    """One live file and its live segments."""

    file_id: int
    level: int
    size_bytes: int
    created_at_ms: int
    holds_compacted: bool
    leased: bool
    segments: tuple[SegmentView, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The planner's whole input besides the clock."""

    topics: Mapping[str, TopicPolicy]
    partitions: Mapping[TopicPartition, PartitionState]
    files: tuple[FileView, ...]


class Trigger(enum.StrEnum):
    """Why a job was proposed."""

    FILE_COUNT = "file_count"
    BYTES = "bytes"
    AGE = "age"
    DIRTY_RATIO = "dirty_ratio"
    MAX_COMPACTION_LAG = "max_compaction_lag"
    FORCED_ALL = "forced_all"


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """How the compactor treats one compacted partition of a job."""

    topic: str
    partition: int
    whole_log: bool  # the job holds every live segment from the log start: tombstones may go
    clean_upto_offset: int  # exclusive; younger than min.compaction.lag.ms from here on
    delete_retention_ms: int
    dirty_start_offset: int = 0  # the cleaner checkpoint: the offset map starts here


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A proposed job: whole input files merged into files at `output_level`."""

    spec_id: str
    input_file_ids: tuple[int, ...]
    output_level: int
    trigger: Trigger
    reason: str
    input_bytes: int
    partitions: tuple[PartitionPlan, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Plan:
    """Jobs to run now, and what the planner is waiting for otherwise."""

    jobs: list[JobSpec]
    waiting: list[str]
