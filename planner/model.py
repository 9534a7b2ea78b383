"""What the planner sees (a snapshot) and what it proposes (job specs). Plain data, no I/O.

The input model is independent of the metadata package; `compactor/snapshot.py` adapts.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from fileformat import Compression
from settings import Section, integer, optional_integer

TopicPartition = tuple[str, int]

LONG_MAX = 2**63 - 1  # Kafka's Long.MAX_VALUE: "never" for max.compaction.lag.ms

# Setting names of the `planner` section. The planner does no I/O: `settings.load` reads
# them from the [planner] table of a settings file and SILT_PLANNER_* variables.
L0_TRIGGER_FILES = "l0.trigger.files"
L0_TRIGGER_BYTES = "l0.trigger.bytes"
L0_MAX_AGE_MS = "l0.max.age.ms"
LEVEL_TRIGGER_FILES = "level.trigger.files"
LEVEL_TRIGGER_BYTES = "level.trigger.bytes"
LEVEL_MAX_AGE_MS = "level.max.age.ms"
TARGET_FILE_BYTES = "target.file.bytes"
MAX_LEVEL = "max.level"


@dataclass(frozen=True, slots=True)
class PlannerConfig(Section):
    """Size-tiered compaction thresholds (the `planner` section).

    Level L (< `max_level`) is merged into L+1 when it holds enough files (`l0_trigger_files`,
    32 as WarpStream; `level_trigger_files` above, i.e. the fan-out), enough bytes, or when
    its oldest file is old enough (`l0_max_age_ms`, 30 s, so the first dedupe happens within
    ~30 s even at low traffic; `level_max_age_ms` above L0, None = never). Jobs are
    bin-packed to about `target_file_bytes` of input each. L0 files younger than
    `l0_max_age_ms` count as Kafka's active segment: they do not count toward a dirty ratio.
    A bad value raises InvalidPlannerConfigError (the settings layer's SettingError).
    """

    SECTION: ClassVar[str] = "planner"

    l0_trigger_files: int = integer(L0_TRIGGER_FILES, 32, lo=1,
                                    doc="L0 is merged into L1 when it holds this many files")
    level_trigger_files: int = integer(
        LEVEL_TRIGGER_FILES, 8, lo=2,
        doc="a level above L0 is merged up when it holds this many files (the fan-out)")
    level_trigger_bytes: int = integer(
        LEVEL_TRIGGER_BYTES, 256 * 1024 * 1024, lo=1,
        doc="a level above L0 is merged up when it holds this many bytes")
    l0_max_age_ms: int = integer(
        L0_MAX_AGE_MS, 30_000, lo=0,
        doc="L0 is merged when its oldest file is this old (younger ones: the active segment)")
    target_file_bytes: int = integer(TARGET_FILE_BYTES, 512 * 1024 * 1024, lo=1,
                                     doc="jobs are bin-packed to about this much input each")
    max_level: int = integer(MAX_LEVEL, 4, lo=1,
                             doc="the highest level: its files are merged up no further")
    l0_trigger_bytes: int = integer(L0_TRIGGER_BYTES, 64 * 1024 * 1024, lo=1,
                                    doc="L0 is merged into L1 when it holds this many bytes")
    level_max_age_ms: int | None = optional_integer(
        LEVEL_MAX_AGE_MS, None, lo=0,
        doc="a level above L0 is merged up when its oldest file is this old")

    def trigger_files(self, level: int) -> int:
        return self.l0_trigger_files if level == 0 else self.level_trigger_files

    def trigger_bytes(self, level: int) -> int:
        return self.l0_trigger_bytes if level == 0 else self.level_trigger_bytes

    def max_age_ms(self, level: int) -> int | None:
        return self.l0_max_age_ms if level == 0 else self.level_max_age_ms


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """The Kafka configs that steer compaction of one topic.

    `compacted`: cleanup.policy has `compact`; `deletes`: it has `delete` (retention is
    applied by the metadata store, not planned here; informational). `codec`: the codec
    partially surviving batches are rewritten in (the topic's compression.type, else the
    compactor's); None: each keeps its input codec (Kafka's `producer`).
    """

    name: str
    compacted: bool
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000
    deletes: bool = False
    codec: Compression | None = None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's log bounds, its cleaner checkpoint (first offset not yet clean) and its
    last stable offset (None: the log end; the cleaner never cleans at or past it)."""

    topic: str
    partition: int
    log_start_offset: int
    next_offset: int
    clean_offset: int = 0
    last_stable_offset: int | None = None


@dataclass(frozen=True, slots=True)
class SegmentView:
    """One live segment: a chunk of a file holding one partition's offsets [base, last].

    Live segments of a partition never overlap. `cleaned_at_ms` is set by a whole-log clean
    (None = dirty, as below Kafka's cleaner checkpoint). `min_timestamp` (first record
    timestamp, None if unknown) dates dirty data for max.compaction.lag.ms, like Kafka's
    first batch timestamp; `created_at_ms` is the fallback.
    """

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
    cleaned_at_ms: int | None
    min_timestamp: int | None = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class FileView:
    """One live file and its live segments; `leased`: an unexpired job holds it."""

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


@dataclass(frozen=True, slots=True)
class TopicCleaning:
    """How far behind the cleaner is on one compacted topic (`policy.cleaner_state`)."""

    max_dirty_ratio: float  # the largest cleanable ratio among its partitions, 0..1
    oldest_dirty_age_ms: int  # age of its oldest dirty record below the first uncleanable


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
    """How the compactor treats one compacted partition of a job (a partition of the job's
    inputs is deduplicated, and its data goes to the compacted-topic output, iff the job has
    a plan for it).

    - `whole_log`: the inputs hold the partition's log from its start (every live segment
      from the first one up to the job's last one), so no older value of a key exists
      outside the job: tombstones past their horizon may go and the checkpoint may advance.
    - `clean_upto_offset` (exclusive): Kafka's first uncleanable offset; records at or above
      are younger than min.compaction.lag.ms and are kept as they are.
    - `dirty_start_offset`: the cleaner checkpoint; the offset map is built from here.
    - `dedupe`: some dirty input data lies below `clean_upto_offset` (else nothing to do).
    - `tombstone_drop_segment_ids`: input segments whose tombstones are past the delete
      horizon (whole_log, cleaned at least delete.retention.ms ago, entirely cleanable).
    - `codec`: the topic's rewrite codec (`TopicPolicy.codec`).
    """

    topic: str
    partition: int
    whole_log: bool
    clean_upto_offset: int
    delete_retention_ms: int
    dirty_start_offset: int = 0
    dedupe: bool = True
    tombstone_drop_segment_ids: frozenset[int] = frozenset()
    codec: Compression | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A proposed job: whole input files merged into files at `output_level`; `partitions`:
    one plan per compacted partition the inputs hold, everything the executor needs to know
    of the topics' policies.

    `spec_id` depends only on the inputs and the level, so a duplicate or retried proposal
    of the same work is recognisable. A spec is a description; a leased spec is a job.
    """

    spec_id: str
    input_file_ids: tuple[int, ...]
    output_level: int
    trigger: Trigger
    reason: str
    input_bytes: int
    partitions: tuple[PartitionPlan, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Plan:
    """Jobs to run now (disjoint inputs), and what the planner is waiting for otherwise."""

    jobs: list[JobSpec]
    waiting: list[str]
