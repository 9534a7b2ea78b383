"""Building one topic-partition's chunk of an object (`ChunkBuilder`): records encoded
here, client batches stored as they came, compactor batches placed with their index data.
"""

from __future__ import annotations

import array
from collections.abc import Callable, Sequence
from typing import Any

import crc32c
import numpy as np
from pyroaring import BitMap

from fileformat.batch import FRAME_SIZE, stamp_log_append_time, verify_batch, with_base_offset
from fileformat.compression import WRITABLE_COMPRESSIONS, Compression
from fileformat.encoder import BatchEncoder, seal_batch
from fileformat.errors import CorruptDataError, UnsupportedError
from fileformat.keyhash import KEY_HASH_SIZE, NULL_KEY_HASH, KeyHasher
from fileformat.objectfile import (
    FLAG_KEYED,
    MAX_OFFSET_SPAN,
    Chunk,
    as_cleaned_at,
    read_only,
)
from fileformat.validate import CheckedBatch, check_client_batch


def _as_offsets(values: Any) -> np.ndarray[Any, np.dtype[np.int64]]:
    arr = np.asarray(values, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError("offsets must be one-dimensional")
    return arr


def _bitmap_of(arr: np.ndarray[Any, np.dtype[np.int64]]) -> BitMap:
    """BitMap from int64 offsets without a per-element Python loop."""
    values = array.array("I")
    values.frombytes(arr.astype(np.uint32).tobytes())
    return BitMap(values)


class ChunkBuilder:
    """Accumulates one topic-partition's batches for one object.

    Relative offsets start at 0 (the chunk base). Records from `append` are encoded by a
    `BatchEncoder` and sealed into a batch once it reaches `max_batch_bytes`. Key hashes
    and tombstones are tracked only for keyed chunks (`hasher` given or `keyed=True`).
    With `sink`, sealed batches are handed to it instead of being kept (used by
    `FileWriter.open_chunk` so a large compacted chunk never sits in memory). With
    `log_append_time`, each batch `append` encodes is stamped as Kafka's broker stamps a
    LogAppendTime topic's (`stamp_log_append_time`) at its records' latest timestamp (the
    caller gives the time it accepted each record); `append_batch` keeps batches as given.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        base_offset: int = -1,
        hasher: KeyHasher | None = None,
        keyed: bool | None = None,
        compression: Compression = Compression.NONE,
        max_batch_bytes: int = 1 << 20,
        sink: Callable[[bytes], None] | None = None,
        log_append_time: bool = False,
    ) -> None:
        if len(topic.encode()) > 0xFFFF or not topic:
            raise ValueError("topic must be 1..65535 utf-8 bytes")
        if not 0 <= partition < 2**31:
            raise ValueError(f"bad partition {partition}")
        if compression not in WRITABLE_COMPRESSIONS.values():
            raise UnsupportedError(f"cannot write {Compression(compression).name} batches")
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        self._hasher = hasher
        self._keyed = hasher is not None if keyed is None else keyed
        self._compression = Compression(compression)
        self._max_batch_bytes = max_batch_bytes
        self._batches: list[bytes] = []
        self._data_len = 0
        self._frame_crc = 0
        self._next = 0
        self._count = 0
        self._offsets = BitMap()
        self._tombstones = BitMap()
        # Non-zero first-cleaned times from append_compacted: (relative offsets, ms) arrays.
        self._tomb_rels: list[np.ndarray[Any, np.dtype[np.int64]]] = []
        self._tomb_times: list[np.ndarray[Any, np.dtype[np.int64]]] = []
        # Offsets and tombstones of append_compacted_run, folded into the bitmaps at finish.
        self._offset_parts: list[np.ndarray[Any, np.dtype[np.int64]]] = []
        self._tomb_parts: list[np.ndarray[Any, np.dtype[np.int64]]] = []
        self._hashes = bytearray()
        self._min_ts: int | None = None
        self._max_ts: int | None = None
        self._open: BatchEncoder | None = None  # the batch being filled
        self._open_base = 0
        self._finished = False
        self._sink = sink
        self._batch_count = 0
        self._log_append_time = log_append_time

    @property
    def record_count(self) -> int:
        """Records appended so far."""
        return self._count

    @property
    def next_offset(self) -> int:
        """The relative offset the next record gets."""
        return self._next

    def size_in_bytes(self) -> int:
        """Approximate bytes this chunk adds to an object (for flush decisions)."""
        open_size = self._open.size if self._open is not None else 0
        return self._data_len + open_size + len(self._hashes)

    def _check_open(self) -> None:
        if self._finished:
            raise RuntimeError("chunk builder already finished")

    def _need_hasher(self) -> KeyHasher | None:
        if self._keyed and self._hasher is None:
            raise ValueError("keyed chunk without a hasher accepts only append_compacted")
        return self._hasher

    def _timestamps(self, low: int, high: int) -> None:
        if self._min_ts is None or low < self._min_ts:
            self._min_ts = low
        if self._max_ts is None or high > self._max_ts:
            self._max_ts = high

    def _store(self, batch: bytes) -> None:
        self._store_many([batch])

    def _store_many(self, batches: Sequence[bytes]) -> None:
        """Keep `batches` (in order), or hand them to the sink in one write."""
        if self._sink is None:
            self._batches.extend(batches)
        else:
            self._sink(batches[0] if len(batches) == 1 else b"".join(batches))
        frame = self._frame_crc
        for batch in batches:
            self._data_len += len(batch)
            frame = crc32c.crc32c(batch[:FRAME_SIZE], frame)
        self._frame_crc = frame
        self._batch_count += len(batches)

    def _seal_open(self) -> None:
        encoder = self._open
        if encoder is None:
            return
        self._open = None
        if not encoder.record_count:  # only failed appends: nothing to seal
            return
        low, high = encoder.min_timestamp, encoder.max_timestamp  # finish() empties it
        try:
            if self._compression == Compression.NONE:
                batch = encoder.finish(self._open_base)
            else:
                batch = seal_batch(encoder.finish(), self._open_base, self._compression)
        except BaseException:
            self._finished = True  # the batch's records are lost: this chunk cannot be written
            raise
        if self._log_append_time:
            batch = stamp_log_append_time(batch, high)
        self._timestamps(low, high)
        self._store(batch)
        self._offsets.add_range(self._open_base, self._next)

    def _start_batch(self) -> BatchEncoder:
        """The encoder of a new open batch at the next offset (the append's checks that
        hold for a whole batch are made here, once)."""
        self._check_open()
        self._need_hasher()
        encoder = self._open = BatchEncoder()
        self._open_base = self._next
        return encoder

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> int:
        """Buffer one record; returns its relative offset. On an error nothing is buffered.

        The per-record hot path: the checks that hold for a whole batch are made when it
        starts (`_start_batch`), the record is encoded in C, timestamps are tracked there.
        """
        encoder = self._open
        if encoder is None:
            encoder = self._start_batch()
        rel = self._next
        if rel >= MAX_OFFSET_SPAN:
            raise ValueError("chunk offset span exceeds 2**32")
        hasher = self._hasher
        if hasher is not None:
            digest = hasher.hash(key)  # may raise: before anything is appended
        size = encoder.append(rel - self._open_base, timestamp, key, value, headers)
        self._next = rel + 1
        self._count += 1
        if hasher is not None:
            self._hashes += digest
            if value is None:
                self._tombstones.add(rel)
        if size >= self._max_batch_bytes:
            self._seal_open()
        return rel

    def append_batch(self, raw: bytes, checked: CheckedBatch | None = None) -> tuple[int, int]:
        """Store a client-encoded batch byte-for-byte (baseOffset patched).

        Returns (first relative offset, record count). The batch is decoded only when
        the chunk is keyed (key hashes, tombstones) or its offsets are not contiguous.
        `checked`: what `check_client_batch(raw, ...)` returned (its checks are not made
        again). A control batch's record (a transaction marker) is no key: in a keyed
        chunk it gets the null key's hash, so compaction never deduplicates it by key.
        On an error the builder is unchanged.
        """
        if self._finished or self._keyed:  # `_check_open`, `_need_hasher`: inline when
            self._check_open()  # neither raises (this runs once per produced batch)
            self._need_hasher()
        hasher = self._hasher
        view = memoryview(raw)
        header, decoded = (checked if checked is not None
                           else check_client_batch(view, hasher is not None))
        first = self._next
        span_end = first + header.last_offset_delta + 1
        if span_end > MAX_OFFSET_SPAN:
            raise ValueError("chunk offset span exceeds 2**32")
        fast = hasher is None and header.record_count == header.last_offset_delta + 1
        if decoded is None and not fast:
            decoded = check_client_batch(view, True)[1]  # `checked` made for an unkeyed chunk
        if hasher is None or decoded is None:
            hashes = b""
        elif header.is_control:  # a marker's record is no key: never in the offset map
            hashes = NULL_KEY_HASH * len(decoded)
        else:
            hashes = hasher.hash_many(k for _, _, _, k in decoded)
        # Nothing below fails on the batch: the builder changes only now.
        if self._open is not None:
            self._seal_open()
        if fast or decoded is None:
            self._offsets.add_range(first, span_end)
            self._timestamps(header.first_timestamp, header.max_timestamp)
        else:
            self._offsets.update([first + d for d, _, _, _ in decoded])
            stamps = [ts for _, ts, _, _ in decoded]
            self._timestamps(min(stamps), max(stamps))
            if hasher is not None:
                self._hashes += hashes
                self._tombstones.update([first + d for d, _, tomb, _ in decoded if tomb])
        self._store_many((with_base_offset(view, first),))
        self._next = span_end
        self._count += header.record_count
        return first, header.record_count

    def append_compacted(
        self,
        raw: Any,
        *,
        base: int,
        offsets: Any,
        tombstones: Any = (),
        key_hashes: bytes = b"",
        tombstone_cleaned_at: Any = None,
    ) -> None:
        """Place a compactor-made batch at relative `base`, trusting the caller's index data.

        `offsets` (sorted, chunk-relative) are the records present in the batch,
        `tombstones` the (sorted) subset with null values, `key_hashes` one hash per offset
        (keyed chunks only). `tombstone_cleaned_at`, aligned with `tombstones`, gives each
        tombstone's first-cleaned time in ms (0 = not yet); None means all 0. The batch is
        CRC-checked, not decoded. On ValueError the builder is unchanged.
        """
        self.append_compacted_run([raw], bases=[base], offsets=offsets, tombstones=tombstones,
                                  key_hashes=key_hashes, tombstone_cleaned_at=tombstone_cleaned_at)

    def append_compacted_run(
        self,
        raws: Sequence[Any],
        *,
        bases: Sequence[int],
        offsets: Any,
        tombstones: Any = (),
        key_hashes: bytes = b"",
        tombstone_cleaned_at: Any = None,
    ) -> None:
        """`append_compacted` for consecutive batches at once (batch i at relative
        `bases[i]`), with the index data of all of them concatenated: what a compaction
        appends per input chunk, checked with one vectorised pass instead of one per batch.
        Every batch is CRC-checked; on ValueError the builder is unchanged. A bytes or
        bytearray batch whose baseOffset is already its base is kept as it is, not copied
        (the builder then owns it).
        """
        self._check_open()
        if not raws or len(bases) != len(raws):
            raise ValueError("need one base per batch, and at least one batch")
        views = [memoryview(r) for r in raws]
        headers = [verify_batch(v) for v in views]
        for h, v in zip(headers, views, strict=True):
            if h.length != len(v):
                raise CorruptDataError(f"batch declares {h.length} bytes, got {len(v)}")
        self._seal_open()
        base_arr = np.asarray(bases, dtype=np.int64)
        counts = np.fromiter((h.record_count for h in headers), np.int64, len(headers))
        span_ends = base_arr + np.fromiter((h.last_offset_delta for h in headers), np.int64,
                                           len(headers)) + 1
        floors = np.concatenate(([self._next], span_ends[:-1]))
        if np.any(base_arr < floors):
            raise ValueError(f"a base is below the next free offset (from {self._next})")
        span_end = int(span_ends[-1])
        if span_end > MAX_OFFSET_SPAN:
            raise ValueError("chunk offset span exceeds 2**32")
        offs = _as_offsets(offsets)
        n = len(offs)
        if n != int(counts.sum()) or np.any(counts == 0):
            raise ValueError(f"{n} offsets given for batches of {counts.tolist()} records")
        ends = np.cumsum(counts)
        if (np.any(offs[ends - counts] < base_arr) or np.any(offs[ends - 1] != span_ends - 1)
                or (n > 1 and not bool(np.all(offs[1:] > offs[:-1])))):
            raise ValueError("offsets must rise strictly within each batch, ending at its last")
        tomb_arr = _as_offsets(tombstones)
        if len(tomb_arr):
            if len(tomb_arr) > 1 and not bool(np.all(tomb_arr[1:] > tomb_arr[:-1])):
                raise ValueError("tombstones must rise strictly")
            at = np.minimum(np.searchsorted(offs, tomb_arr), n - 1)
            if np.any(offs[at] != tomb_arr):
                raise ValueError("tombstones must be a subset of offsets")
        times = None
        if tombstone_cleaned_at is not None:
            times = as_cleaned_at(tombstone_cleaned_at, len(tomb_arr))
        if self._keyed:
            if len(key_hashes) != n * KEY_HASH_SIZE:
                raise ValueError(f"need {n} key hashes, got {len(key_hashes)} bytes")
        elif key_hashes or len(tomb_arr):
            raise ValueError("key hashes/tombstones given for an unkeyed chunk")
        # Nothing below fails: the builder changes only now. Bitmaps are built at finish.
        if self._keyed:
            self._hashes += key_hashes
            if len(tomb_arr):
                self._tomb_parts.append(tomb_arr.copy())  # the caller may reuse it
                if times is not None and times.any():
                    self._tomb_rels.append(self._tomb_parts[-1])
                    self._tomb_times.append(times)
        self._offset_parts.append(offs.copy())
        placed = []
        for h, v, raw, b in zip(headers, views, raws, bases, strict=True):
            self._timestamps(h.first_timestamp, h.max_timestamp)
            own = h.base_offset == b and isinstance(raw, bytes | bytearray)
            placed.append(raw if own else with_base_offset(v, b))
        self._store_many(placed)
        self._next = span_end
        self._count += n

    def _fold_parts(self) -> None:
        """Add the offsets and tombstones gathered by append_compacted_run to the bitmaps."""
        if self._offset_parts:
            self._offsets |= _bitmap_of(np.concatenate(self._offset_parts))
            self._offset_parts = []
        if self._tomb_parts:
            self._tombstones |= _bitmap_of(np.concatenate(self._tomb_parts))
            self._tomb_parts = []

    def finish(self) -> Chunk:
        """Seal the open batch and return the chunk; the builder is then unusable."""
        self._check_open()
        self._seal_open()
        self._fold_parts()
        self._finished = True
        return Chunk(
            topic=self.topic,
            partition=self.partition,
            base_offset=self.base_offset,
            batches=self._batches,
            data_len=self._data_len,
            record_count=self._count,
            offset_span=self._next,
            min_timestamp=-1 if self._min_ts is None else self._min_ts,
            max_timestamp=-1 if self._max_ts is None else self._max_ts,
            offsets=self._offsets,
            tombstones=self._tombstones,
            key_hashes=bytes(self._hashes),
            flags=FLAG_KEYED if self._keyed else 0,
            frame_crc=self._frame_crc,
            batch_count=self._batch_count,
            streamed=self._sink is not None,
            tombstone_cleaned_at=self._cleaned_at_array(),
        )

    def _cleaned_at_array(self) -> np.ndarray[Any, np.dtype[np.int64]] | None:
        """First-cleaned times aligned with the tombstone bitmap; None if all are 0."""
        if not self._tomb_times:
            return None
        order = np.frombuffer(self._tombstones.to_array(), dtype=np.uint32).astype(np.int64)
        out = np.zeros(len(order), dtype=np.int64)
        out[np.searchsorted(order, np.concatenate(self._tomb_rels))] = np.concatenate(
            self._tomb_times
        )
        return read_only(out)
