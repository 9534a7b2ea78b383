"""Adapter: the metadata store's snapshot -> the planner's input model."""

from __future__ import annotations

from collections import defaultdict

from metadata.models import SegmentInfo
from metadata.models import Snapshot as MetadataSnapshot
from planner import FileView, PartitionState, SegmentView, Snapshot, TopicPolicy


def planner_snapshot(snap: MetadataSnapshot, now_ms: int) -> Snapshot:
    """Only live files and segments; a file held by an unexpired job lease is `leased`."""
    topics = {
        t.name: TopicPolicy(
            name=t.name,
            compacted=t.config.compacted,
            min_cleanable_dirty_ratio=t.config.min_cleanable_dirty_ratio,
            min_compaction_lag_ms=t.config.min_compaction_lag_ms,
            max_compaction_lag_ms=t.config.max_compaction_lag_ms,
            delete_retention_ms=t.config.delete_retention_ms,
            deletes=t.config.deletes,
        )
        for t in snap.topics
    }
    partitions = {
        (p.topic, p.partition): PartitionState(p.topic, p.partition, p.log_start_offset,
                                               p.next_offset, p.clean_offset)
        for p in snap.partitions
    }
    by_file: dict[int, list[SegmentInfo]] = defaultdict(list)
    for s in snap.segments:
        by_file[s.file_id].append(s)
    leased = getattr(snap, "leased_file_ids", None)
    files = tuple(
        FileView(
            file_id=f.id,
            level=f.level,
            size_bytes=f.size or 0,
            created_at_ms=f.created_at_ms,
            holds_compacted=f.holds_compacted,
            leased=(f.id in leased) if leased is not None else f.job_id is not None,
            segments=tuple(
                SegmentView(
                    segment_id=s.id, file_id=s.file_id, topic=s.topic, partition=s.partition,
                    base_offset=s.base_offset, last_offset=s.last_offset,
                    size_bytes=s.data_len, record_count=s.record_count,
                    tombstone_count=s.tombstone_count, max_timestamp=s.max_timestamp,
                    created_at_ms=s.created_at_ms, cleaned_at_ms=s.cleaned_at_ms,
                    min_timestamp=s.min_timestamp,
                )
                for s in by_file.get(f.id, ())
            ),
        )
        for f in snap.files
    )
    return Snapshot(topics, partitions, files)
