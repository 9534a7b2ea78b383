"""The consume path: read a topic-partition from an offset.

One indexed metadata query finds the live segments at or after the offset; each segment's
chunk is fetched with one ranged GET. `Reader.read` decodes its batches into records (as a
Kafka consumer: markers left out; read_committed: below the last stable offset, aborted
transactions left out);
`Reader.read_batches` hands the batches on as bytes without decoding a record, as Fetch
does. Offsets removed by compaction are simply absent from the batches (the roaring bitmap
in the index records them), so both skip holes by construction. Reading past the end
returns nothing; reading below the log start raises `OffsetOutOfRangeError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from fileformat import Record, chunk_batches, iter_chunk_records, verify_chunk
from fileformat.batch import LAST_OFFSET_DELTA_POS, iter_records, rebase_in_place, split_frames
from fileformat.errors import naming
from metadata import MetadataStore, SegmentInfo
from metadata.segments import expected_index
from metadata.txnlog import AbortedIndex
from objectstore import ObjectStore

SEGMENTS_PER_QUERY = 256
_BASE = struct.Struct(">q")
_LAST_DELTA = struct.Struct(">i")


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


def live_segments(metadata: MetadataStore, topic: str, partition: int,
                  from_offset: int) -> Iterator[SegmentInfo]:
    """The live segments holding offsets >= from_offset, in order, a page per query
    (OffsetOutOfRangeError, from the first query, if from_offset is below the log start)."""
    position = from_offset
    while True:
        segments = metadata.find_segments(topic, partition, position, limit=SEGMENTS_PER_QUERY)
        yield from segments
        if len(segments) < SEGMENTS_PER_QUERY:
            return
        position = max(position, segments[-1].last_offset + 1)


def read_segment(store: ObjectStore, seg: SegmentInfo) -> Iterator[Record]:
    """One segment's records with absolute offsets: one ranged GET, every batch verified
    against what the commit recorded (framing CRC, counts) before the first is yielded; a
    FormatError names the object."""
    data = store.get_range(seg.object_key, seg.data_pos, seg.data_pos + seg.data_len)
    with naming(seg.object_key):
        yield from iter_chunk_records(data, seg.base_offset, index=expected_index(seg))


def read_segment_batches(store: ObjectStore, seg: SegmentInfo) -> memoryview:
    """One segment's batches as Fetch serves them (read-only): one ranged GET, verified as
    `read_segment` verifies it (every batch's CRC, the framing CRC, counts), then patched as
    the segment cache patches it (`rebase_in_place`: baseOffset absolute, leader epoch -1;
    both outside the batch CRC, per batch, never per record)."""
    data = store.get_range_writable(seg.object_key, seg.data_pos, seg.data_pos + seg.data_len)
    with naming(seg.object_key):
        verify_chunk(data, expected_index(seg))
    rebase_in_place(data, seg.base_offset)
    return memoryview(data).toreadonly()


class Reader:
    """Reads records, or raw batches, of one topic-partition in offset order."""

    def __init__(self, store: ObjectStore, metadata: MetadataStore) -> None:
        self._store = store
        self._metadata = metadata

    def _segments(self, topic: str, partition: int, from_offset: int) -> Iterator[SegmentInfo]:
        return live_segments(self._metadata, topic, partition, from_offset)

    def read(
        self,
        topic: str,
        partition: int,
        from_offset: int = 0,
        max_records: int | None = None,
        *,
        committed: bool = False,
    ) -> Iterator[ConsumedRecord]:
        """Yield records with offset >= from_offset, at most max_records of them, as a Kafka
        consumer returns them: transaction markers (control batches) are never records.
        `committed` (isolation.level=read_committed): only below the partition's last
        stable offset, and without the records of aborted transactions (the partition's
        aborted-transaction index, read once for the range)."""
        if max_records is not None and max_records <= 0:
            return
        stable: int | None = None
        aborted = AbortedIndex(())
        if committed:
            info = next((p for p in self._metadata.partitions(topic)
                         if p.partition == partition), None)
            stable = info.last_stable_offset if info is not None else 0
            aborted = AbortedIndex(self._metadata.aborted_transactions(
                [(topic, partition, from_offset, stable)]).get((topic, partition), ()))
        emitted = 0
        position = from_offset  # past every segment read: never an offset twice
        for seg in self._segments(topic, partition, from_offset):
            data = self._store.get_range(seg.object_key, seg.data_pos,
                                         seg.data_pos + seg.data_len)
            with naming(seg.object_key):
                batches = chunk_batches(data, expected_index(seg))
            for header, view in batches:
                base = seg.base_offset + header.base_offset
                if stable is not None and base >= stable:
                    return
                if header.is_control or (aborted and header.is_transactional
                                         and aborted.aborted(header.producer_id, base)):
                    continue
                for rec in iter_records(view, header, seg.base_offset):
                    if rec.offset < position:
                        continue
                    yield ConsumedRecord(topic, partition, rec.offset, rec.timestamp, rec.key,
                                         rec.value, rec.headers)
                    emitted += 1
                    if max_records is not None and emitted >= max_records:
                        return
            position = max(position, seg.last_offset + 1)

    def read_batches(self, topic: str, partition: int, from_offset: int = 0
                     ) -> Iterator[memoryview]:
        """Yield the stored RecordBatch v2 batches holding offsets >= from_offset, each a
        read-only view of its segment's ranged GET (one per segment; no record decoded or
        copied), with absolute baseOffsets and leader epoch -1 as Fetch sends them.

        As in Kafka's Fetch, the first batch may start below from_offset (a batch is not
        split): callers that want exact offsets skip the records below it. Batches wholly
        below from_offset are skipped.
        """
        position = from_offset
        for seg in self._segments(topic, partition, from_offset):
            for batch in split_frames(read_segment_batches(self._store, seg)):
                last = (_BASE.unpack_from(batch)[0]
                        + _LAST_DELTA.unpack_from(batch, LAST_OFFSET_DELTA_POS)[0])
                if last >= position:
                    yield batch
            position = max(position, seg.last_offset + 1)
