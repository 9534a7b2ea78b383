"""Adapter: the metadata store's snapshot -> the planner's input model."""

from __future__ import annotations

from fileformat import Compression
from metadata.models import SegmentInfo
from metadata.models import Snapshot as MetadataSnapshot
from metadata.topicconfig import COMPRESSION_TYPE
from planner import FileView, PartitionState, SegmentView, Snapshot, TopicPolicy


class PlannerSnapshots:
    """Converts metadata snapshots for the planner, remembering each file's converted
    segments by the identity of its metadata tuple: a handle's successive snapshots hand
    an unchanged file the very same tuple (`metadata.models.Snapshot`), so a round converts
    only the files committed or shortened since the last one.

    `default_codec` is a topic's rewrite codec when it sets no compression.type of its own
    (the compactor's, as Kafka's broker-level compression.type is for its topics).
    """

    def __init__(self, default_codec: Compression | None = None) -> None:
        self._default_codec = default_codec
        self._seen: dict[int, tuple[tuple[SegmentInfo, ...], tuple[SegmentView, ...]]] = {}

    def convert(self, snap: MetadataSnapshot) -> Snapshot:
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
                codec=(t.config.rewrite_codec if COMPRESSION_TYPE in t.configs
                       else self._default_codec),
            )
            for t in snap.topics
        }
        partitions = {
            (p.topic, p.partition): PartitionState(p.topic, p.partition, p.log_start_offset,
                                                   p.next_offset, p.clean_offset,
                                                   p.last_stable_offset)
            for p in snap.partitions
        }
        seen: dict[int, tuple[tuple[SegmentInfo, ...], tuple[SegmentView, ...]]] = {}
        for f in snap.files:
            infos = snap.file_segments.get(f.id, ())
            before = self._seen.get(f.id)
            seen[f.id] = (infos, before[1] if before is not None and before[0] is infos
                          else tuple(segment_view(s) for s in infos))
        self._seen = seen
        files = tuple(
            FileView(file_id=f.id, level=f.level, size_bytes=f.size or 0,
                     created_at_ms=f.created_at_ms, holds_compacted=f.holds_compacted,
                     leased=f.leased, segments=seen[f.id][1])
            for f in snap.files
        )
        return Snapshot(topics, partitions, files)


def segment_view(s: SegmentInfo) -> SegmentView:
    """What the planner sees of a live segment."""
    return SegmentView(
        segment_id=s.id, file_id=s.file_id, topic=s.topic, partition=s.partition,
        base_offset=s.base_offset, last_offset=s.last_offset, size_bytes=s.data_len,
        record_count=s.record_count, tombstone_count=s.tombstone_count,
        max_timestamp=s.max_timestamp, created_at_ms=s.created_at_ms,
        cleaned_at_ms=s.cleaned_at_ms, min_timestamp=s.min_timestamp,
    )
