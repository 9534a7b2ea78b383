"""Metadata store of siltstream: topics and configs, partitions' offsets, objects and segments,
on SQLite (embedded default) or PostgreSQL, behind one API (`MetadataStore`)."""

from .models import (
    ChunkMeta,
    CompactionCommit,
    CompactionOutput,
    FileInfo,
    JobInfo,
    Lease,
    LevelStats,
    OutputSegment,
    PartitionInfo,
    PlacedSegment,
    RetentionChange,
    RetentionResult,
    Segment,
    SegmentInfo,
    Snapshot,
    StoreStats,
    TopicInfo,
)
from .store import DEFAULT_URL, MetadataStore
from .topicconfig import TopicConfig

__all__ = [
    "DEFAULT_URL",
    "ChunkMeta",
    "CompactionCommit",
    "CompactionOutput",
    "FileInfo",
    "JobInfo",
    "Lease",
    "LevelStats",
    "MetadataStore",
    "OutputSegment",
    "PartitionInfo",
    "PlacedSegment",
    "RetentionChange",
    "RetentionResult",
    "Segment",
    "SegmentInfo",
    "Snapshot",
    "StoreStats",
    "TopicConfig",
    "TopicInfo",
]
