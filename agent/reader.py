"""The consume path: read a topic-partition from an offset.

One indexed metadata query finds the live segments at or after the offset; each segment's
chunk is fetched with one ranged GET and its batches decoded. Offsets removed by
compaction are simply absent from the batches (the roaring bitmap in the index records
them), so the reader skips holes by construction. Reading past the end returns nothing;
reading below the log start raises `OffsetOutOfRangeError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fileformat import Record, iter_chunk_records
from metadata import MetadataStore, SegmentInfo
from metadata.segments import expected_index
from objectstore import ObjectStore

SEGMENTS_PER_QUERY = 256


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """A record with its absolute offset and where it came from."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def read_segment(store: ObjectStore, seg: SegmentInfo) -> Iterator[Record]:
    """One segment's records with absolute offsets: one ranged GET, every batch verified
    against what the commit recorded (framing CRC, counts) before the first is yielded."""
    data = store.get_range(seg.object_key, seg.data_pos, seg.data_pos + seg.data_len)
    return iter_chunk_records(data, seg.base_offset, index=expected_index(seg))


class Reader:
    """Reads records of one topic-partition in offset order."""

    def __init__(self, store: ObjectStore, metadata: MetadataStore) -> None:
        self._store = store
        self._metadata = metadata

    def read(
        self,
        topic: str,
        partition: int,
        from_offset: int = 0,
        max_records: int | None = None,
    ) -> Iterator[ConsumedRecord]:
        """Yield records with offset >= from_offset, at most max_records of them."""
        if max_records is not None and max_records <= 0:
            return
        emitted = 0
        position = from_offset
        while True:
            segments = self._metadata.find_segments(
                topic, partition, position, limit=SEGMENTS_PER_QUERY
            )
            if not segments:
                return
            for seg in segments:
                for rec in read_segment(self._store, seg):
                    if rec.offset < position:
                        continue
                    yield ConsumedRecord(
                        topic, partition, rec.offset, rec.timestamp, rec.key, rec.value, rec.headers
                    )
                    emitted += 1
                    if max_records is not None and emitted >= max_records:
                        return
                position = max(position, seg.last_offset + 1)
            if len(segments) < SEGMENTS_PER_QUERY:
                return
