"""Plain frozen values the metadata store takes and returns (no database handles inside)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .topicconfig import TopicConfig


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: its id, name, partition count, effective config and the stored overrides."""

    id: int
    name: str
    partitions: int
    config: TopicConfig
    configs: Mapping[str, str]
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's offsets: readable from log_start_offset, next append at next_offset."""

    topic: str
    partition: int
    log_start_offset: int
    next_offset: int
    clean_offset: int = 0  # Kafka's cleaner checkpoint: records below it are already clean


@dataclass(frozen=True, slots=True)
class ChunkMeta:
    """What a commit records of one chunk (one topic-partition's records in an object).

    offset_span is how many offsets the chunk consumes (>= record_count once compacted away
    records leave gaps; equal for fresh data); positions are byte offsets in the object.
    """

    topic: str
    partition: int
    record_count: int
    offset_span: int
    data_pos: int
    data_len: int
    hash_pos: int
    hash_count: int
    batch_count: int
    min_timestamp: int
    max_timestamp: int
    tombstone_count: int
    frame_crc: int = 0  # CRC32C of the batches' unchecksummed 17-byte prefixes (fileformat)


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One object's row; the layout fields are None until the file is committed."""

    id: int
    object_key: str
    size: int | None
    data_offset: int | None
    data_length: int | None
    meta_offset: int | None
    meta_length: int | None
    level: int
    state: str
    holds_compacted: bool
    created_at_ms: int
    state_changed_at_ms: int
    job_id: int | None
    leased: bool = False  # held by a leased, unexpired compaction job (snapshot, get_file)


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment (a chunk's place in a partition's log) plus its object's key and size."""

    id: int
    file_id: int
    topic_id: int
    topic: str
    partition: int
    base_offset: int
    last_offset: int  # inclusive: the last offset the segment covers
    record_count: int
    data_pos: int
    data_len: int
    hash_pos: int
    hash_count: int
    batch_count: int
    min_timestamp: int
    max_timestamp: int
    tombstone_count: int
    frame_crc: int
    live: bool
    created_at_ms: int
    cleaned_at_ms: int | None
    object_key: str
    file_size: int | None

    @property
    def offset_span(self) -> int:
        """How many offsets the segment covers (records plus compacted-away gaps)."""
        return self.last_offset - self.base_offset + 1


@dataclass(frozen=True, slots=True)
class LevelStats:
    """Live files, their bytes and live segments at one compaction level."""

    level: int
    files: int
    bytes: int
    segments: int


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counts for operators: live data per level, files and bytes per state."""

    levels: tuple[LevelStats, ...]
    files_by_state: Mapping[str, int] = field(default_factory=dict)
    bytes_by_state: Mapping[str, int] = field(default_factory=dict)
    topics: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (used by `silt stats --json`)."""
        return {
            "topics": self.topics,
            "levels": [
                {"level": lv.level, "files": lv.files, "bytes": lv.bytes, "segments": lv.segments}
                for lv in self.levels
            ],
            "files_by_state": dict(self.files_by_state),
            "bytes_by_state": dict(self.bytes_by_state),
        }


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A consistent view for the compaction planner: topics, partitions, live files+segments."""

    taken_at_ms: int
    topics: tuple[TopicInfo, ...]
    partitions: tuple[PartitionInfo, ...]
    files: tuple[FileInfo, ...]
    segments: tuple[SegmentInfo, ...]
    leased_file_ids: frozenset[int] = frozenset()  # held by unexpired compaction leases


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's hold on a compaction job; `fence` orders competing holders."""

    job_id: int
    spec_id: str
    fence: int
    owner: str
    input_file_ids: tuple[int, ...]
    expires_ms: int


@dataclass(frozen=True, slots=True)
class OutputSegment:
    """A segment of a compaction output: explicit offsets (they never change)."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    record_count: int
    data_pos: int
    data_len: int
    hash_pos: int
    hash_count: int
    batch_count: int
    min_timestamp: int
    max_timestamp: int
    tombstone_count: int
    frame_crc: int
    cleaned_at_ms: int | None


@dataclass(frozen=True, slots=True)
class CompactionOutput:
    """One uploaded output object (registered pending) and its segments."""

    file_id: int
    size: int
    data_offset: int
    data_length: int
    meta_offset: int
    meta_length: int
    segments: tuple[OutputSegment, ...]


@dataclass(frozen=True, slots=True)
class CompactionCommit:
    """What a committed compaction changed."""

    job_id: int
    retired_file_ids: tuple[int, ...]
    output_file_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RetentionChange:
    """What retention removed from one partition: a prefix of its log, up to the new start."""

    topic: str
    partition: int
    log_start_offset: int  # the new log start (one past the last removed offset)
    segments: int
    records: int
    bytes: int


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """One retention pass: the partitions it shortened and the files left with no live
    segment (retired: their objects are deleted after the GC grace period)."""

    changes: tuple[RetentionChange, ...]
    retired_file_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One row of the jobs table."""

    id: int
    spec_id: str
    state: str
    input_file_ids: tuple[int, ...]
    owner: str
    fence: int
    lease_expires_ms: int
    attempts: int
    created_at_ms: int
    updated_at_ms: int
    result: Mapping[str, Any] | None
    input_segments: int = 0  # live segments of the inputs when first leased
