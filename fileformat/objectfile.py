"""The multi-partition object: chunks of Kafka batches for many topic-partitions.

Byte layout (big-endian; see docs/format.md for the field tables)::

    HEADER   magic "SILT" (4) | version u16 | flags u16 (0)                         8 bytes
    DATA     chunk 0 batches | chunk 1 batches | ...     (ordered by (topic, partition))
    META     entry 0 | hashes 0 | crc 0 | entry 1 | hashes 1 | crc 1 | ... | TRAILER
             entry   = ENTRY struct | topic utf-8 | offsets bitmap | tombstone block
             tombstone block = bitmap_len u32 | tombstone bitmap | cleaned-at times
             cleaned-at times = nothing (all 0) | tombstone count x u64, in bitmap order
             hashes  = hash_count x 16-byte keyed key hashes, in offset order
             crc     = CRC32C(entry + hashes)                                         4 bytes
             TRAILER = chunk_count u32 | CRC32C(all entry bytes before the trailer)   8 bytes
    FOOTER   meta_offset u64 | meta_length u64 | data_offset u64 | data_length u64 |
             meta_crc u32 (CRC32C of the whole META section) | chunk_count u32 |
             version u16 | reserved u16 (0) | footer_crc u32 (bytes 0..43) | magic "SILT"
                                                                                     52 bytes

Each chunk's batches carry baseOffsets RELATIVE to the chunk's base offset. Kafka's batch CRC
skips the first 17 bytes of a batch (baseOffset, length, leaderEpoch, magic); the entry's
`frame_crc` is CRC32C over those 17-byte prefixes of all the chunk's batches in order, so every
byte of an object is covered by some checksum, and readers additionally require the batches to
tile `data_len` exactly with increasing base offsets inside `offset_span`.

Keyed chunks record, per tombstone, the time (ms) a whole-log clean first retained it (0 =
not yet): the base of Kafka's delete horizon, kept per record instead of per batch. Writers
omit the times when all are 0; readers always expose one value per tombstone.

Readers are forward-only: `iter_meta` reads the META section as one sequential stream
(`iter_meta_streamed`: the same, with each entry's key hashes read in blocks as the consumer
asks) and `DataReader` reads the DATA section chunk by chunk; neither seeks.
"""

from __future__ import annotations

import array
import io
import struct
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import crc32c
import numpy as np
from pyroaring import BitMap

from fileformat.batch import (
    FRAME_SIZE,
    WRITABLE_COMPRESSIONS,
    BatchEncoder,
    BatchHeader,
    CheckedBatch,
    Compression,
    Record,
    check_batch,
    check_client_batch,
    iter_records,
    read_header,
    seal_batch,
    verify_batch,
    with_base_offset,
)
from fileformat.errors import CorruptDataError, TruncatedError, UnsupportedError
from fileformat.keyhash import KEY_HASH_SIZE, KeyHasher

OBJECT_MAGIC = b"SILT"
FORMAT_VERSION = 1

OBJECT_HEADER = struct.Struct(
    ">"
    "4s"  # magic: b"SILT"
    "H"  # version: FORMAT_VERSION
    "H"  # flags: reserved, 0
)
OBJECT_HEADER_SIZE = OBJECT_HEADER.size

ENTRY = struct.Struct(
    ">"
    "I"  # entry_size: bytes of this entry from here through its trailing CRC (incl. hashes)
    "i"  # partition
    "q"  # base_offset: absolute base, or -1 = assigned at commit
    "Q"  # data_pos: absolute position of the chunk's first batch in the object
    "Q"  # data_len: bytes of the chunk's batches
    "Q"  # hash_rel: position of the key hashes relative to the META section start
    "Q"  # hash_count: number of 16-byte key hashes (0 unless FLAG_KEYED)
    "I"  # batch_count
    "Q"  # record_count: records present (= cardinality of the offsets bitmap)
    "Q"  # offset_span: last relative offset + 1 (gaps allowed)
    "q"  # min_timestamp: -1 when empty
    "q"  # max_timestamp: -1 when empty
    "I"  # frame_crc: CRC32C over the 17-byte prefixes of all batches
    "I"  # flags: FLAG_KEYED; other bits 0
    "H"  # topic_len: bytes of the utf-8 topic name
    "I"  # offsets_len: bytes of the serialized offsets bitmap
    "I"  # tombstones_len: bytes of the tombstone block (see TOMB_HEAD)
)
# The tombstone block: u32 bitmap length, the serialized tombstone bitmap, then either
# nothing (every tombstone never cleaned) or one u64 per tombstone in bitmap order: the
# time (ms) a whole-log clean first retained it, 0 = not yet (Kafka's delete horizon base).
TOMB_HEAD = struct.Struct(">I")
CLEANED_AT_DTYPE = np.dtype(">u8")  # on disk; in memory int64, 0 <= value < 2**63
ENTRY_SIZE_FIELD = struct.Struct(">I")
ENTRY_CRC = struct.Struct(">I")


def meta_entry_end(hash_pos: int, hash_count: int) -> int:
    """Where a chunk's META record ends (and the next one starts), from its absolute key-hash
    position and count: the key hashes and the entry CRC are the record's last parts."""
    return hash_pos + KEY_HASH_SIZE * hash_count + ENTRY_CRC.size


TRAILER = struct.Struct(
    ">"
    "I"  # chunk_count
    "I"  # entries_crc: CRC32C of every META byte before the trailer
)
FOOTER = struct.Struct(
    ">"
    "Q"  # meta_offset
    "Q"  # meta_length: includes the trailer
    "Q"  # data_offset: always OBJECT_HEADER_SIZE
    "Q"  # data_length
    "I"  # meta_crc: CRC32C of the whole META section
    "I"  # chunk_count
    "H"  # version
    "H"  # reserved: 0
    "I"  # footer_crc: CRC32C of the footer bytes before this field
    "4s"  # magic: b"SILT"
)
FOOTER_SIZE = FOOTER.size
FOOTER_CRC_POS = struct.calcsize(">QQQQIIHH")

FLAG_KEYED = 0x1
"""The chunk carries one key hash per record and a tombstone bitmap (compacted topics)."""
_KNOWN_FLAGS = FLAG_KEYED
MAX_OFFSET_SPAN = 2**32  # relative offsets live in 32-bit roaring bitmaps
_COPY_BLOCK = 1 << 20
# FileWriter hands its output on in writes of about this size by default (one syscall or
# upload-buffer append per MiB, not one per batch: an agent flush holds ~1,000 small chunks).
WRITE_BLOCK = 1 << 20


class Readable(Protocol):
    """A forward-only byte stream (e.g. an object-store range GET body)."""

    def read(self, n: int, /) -> bytes: ...


class ReadAhead:
    """A Readable serving small reads (META entries: a few per chunk) from reads of at least
    `block` bytes of `stream`, which it may read up to its end: for a stream over exactly
    one section (a range GET), so each read need not be a call into the store."""

    def __init__(self, stream: Readable, block: int = _COPY_BLOCK) -> None:
        self._stream = stream
        self._block = block
        self._buf = b""
        self._pos = 0

    def read(self, n: int, /) -> bytes:
        pos, buf = self._pos, self._buf
        if n <= len(buf) - pos:
            self._pos = pos + n
            return buf[pos : pos + n]
        parts = [buf[pos:]]
        want = n - len(parts[0])
        while want > 0:
            more = self._stream.read(max(want, self._block))
            if not more:
                break
            parts.append(more)
            want -= len(more)
        data = b"".join(parts)
        self._buf, self._pos = data, min(n, len(data))
        return data[:n]


# ---------------------------------------------------------------------------------------
# data model


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """What the META section says about one chunk (its key hashes travel separately)."""

    topic: str
    partition: int
    base_offset: int
    data_pos: int
    data_len: int
    hash_pos: int
    hash_count: int
    batch_count: int
    record_count: int
    offset_span: int
    min_timestamp: int
    max_timestamp: int
    offsets: BitMap = field(compare=False, repr=False)
    tombstones: BitMap = field(compare=False, repr=False)
    flags: int = 0
    frame_crc: int = 0
    tombstone_cleaned_at: np.ndarray[Any, np.dtype[np.int64]] = field(
        default_factory=lambda: _frozen(np.zeros(0, dtype=np.int64)), compare=False, repr=False
    )
    """Per tombstone, in bitmap (ascending offset) order: the time (ms) a whole-log clean
    first retained it, 0 = never. Read-only int64, `len(tombstones)` long."""

    @property
    def data_end(self) -> int:
        """Position just after the chunk's last batch."""
        return self.data_pos + self.data_len

    @property
    def tombstone_count(self) -> int:
        """How many of the chunk's records are tombstones."""
        return len(self.tombstones)

    @property
    def keyed(self) -> bool:
        """Whether the chunk carries key hashes and tombstones."""
        return bool(self.flags & FLAG_KEYED)


@dataclass(frozen=True, slots=True)
class FileLayout:
    """Where things are in a written object (what the metadata store records)."""

    size: int
    data_offset: int
    data_length: int
    meta_offset: int
    meta_length: int
    meta_crc: int
    chunks: list[ChunkIndex]


@dataclass(frozen=True, slots=True)
class Footer:
    """The fixed-size tail of an object."""

    meta_offset: int
    meta_length: int
    data_offset: int
    data_length: int
    meta_crc: int
    chunk_count: int
    version: int


@dataclass(frozen=True, slots=True)
class Chunk:
    """A finished chunk from `ChunkBuilder.finish`, ready for `FileWriter.add`."""

    topic: str
    partition: int
    base_offset: int
    batches: list[bytes]
    data_len: int
    record_count: int
    offset_span: int
    min_timestamp: int
    max_timestamp: int
    offsets: BitMap
    tombstones: BitMap
    key_hashes: bytes
    flags: int
    frame_crc: int
    batch_count: int
    streamed: bool = False
    """True if the batches already went to a FileWriter (see `FileWriter.open_chunk`)."""
    tombstone_cleaned_at: np.ndarray[Any, np.dtype[np.int64]] | None = None
    """Per tombstone first-cleaned ms in bitmap order (see `ChunkIndex`); None = all 0."""


# ---------------------------------------------------------------------------------------
# building chunks


def _as_offsets(values: Any) -> np.ndarray[Any, np.dtype[np.int64]]:
    arr = np.asarray(values, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError("offsets must be one-dimensional")
    return arr


def _frozen(arr: np.ndarray[Any, np.dtype[np.int64]]) -> np.ndarray[Any, np.dtype[np.int64]]:
    arr.flags.writeable = False
    return arr


_NO_TIMES = _frozen(np.zeros(0, dtype=np.int64))


def _as_cleaned_at(values: Any, n: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Validated first-cleaned times: n non-negative int64 values (a fresh, read-only copy)."""
    raw = np.asarray(values)
    if raw.ndim != 1 or len(raw) != n:
        raise ValueError(f"tombstone_cleaned_at must hold one value per tombstone ({n})")
    if n and raw.dtype.kind not in "iu":
        raise ValueError("tombstone_cleaned_at must be integers (ms)")
    if raw.dtype.kind == "u" and n and int(raw.max()) >= 2**63:
        raise ValueError("tombstone_cleaned_at values must be below 2**63")
    times = raw.astype(np.int64)  # always a copy: callers may reuse their buffer
    if n and int(times.min()) < 0:
        raise ValueError("tombstone_cleaned_at values must be >= 0")
    return _frozen(times)


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
    `FileWriter.open_chunk` so a large compacted chunk never sits in memory).
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
        again). On an error the builder is unchanged.
        """
        self._check_open()
        hasher = self._need_hasher()
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
        hashes = b"" if hasher is None or decoded is None else hasher.hash_many(
            k for _, _, _, k in decoded)
        # Nothing below fails on the batch: the builder changes only now.
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
        self._store(with_base_offset(view, first))
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
            times = _as_cleaned_at(tombstone_cleaned_at, len(tomb_arr))
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
        return _frozen(out)


# ---------------------------------------------------------------------------------------
# writing objects


def _encode_entry(
    chunk: Chunk, times: np.ndarray[Any, np.dtype[np.int64]], data_pos: int, entry_rel: int
) -> tuple[bytes, bytes, bytes]:
    """(entry bytes incl. variable parts, key hashes, crc) for an entry at `entry_rel` in META.

    `times` are the chunk's validated first-cleaned times (one per tombstone).
    """
    topic = chunk.topic.encode()
    offsets = chunk.offsets.serialize()
    bitmap = chunk.tombstones.serialize()
    tail = times.astype(CLEANED_AT_DTYPE).tobytes() if len(times) and times.any() else b""
    tombs = TOMB_HEAD.pack(len(bitmap)) + bitmap + tail
    hashes = chunk.key_hashes
    size = ENTRY.size + len(topic) + len(offsets) + len(tombs) + len(hashes) + ENTRY_CRC.size
    hash_rel = entry_rel + ENTRY.size + len(topic) + len(offsets) + len(tombs)
    fixed = ENTRY.pack(
        size,
        chunk.partition,
        chunk.base_offset,
        data_pos,
        chunk.data_len,
        hash_rel,
        len(hashes) // KEY_HASH_SIZE,
        chunk.batch_count,
        chunk.record_count,
        chunk.offset_span,
        chunk.min_timestamp,
        chunk.max_timestamp,
        chunk.frame_crc,
        chunk.flags,
        len(topic),
        len(offsets),
        len(tombs),
    )
    entry = b"".join((fixed, topic, offsets, tombs))
    crc = crc32c.crc32c(hashes, crc32c.crc32c(entry))
    return entry, hashes, ENTRY_CRC.pack(crc)


class FileWriter:
    """Streams one object: chunk data goes out on `add`, META and footer on `finish`.

    Memory stays bounded: index entries and key hashes are spooled to a
    SpooledTemporaryFile (in memory up to `spool_limit`, then a local temp file), and the
    bytes are passed to `write` in order, in blocks of at least `write_block` bytes (a
    batch that large on its own) but the last, which `finish` writes.
    """

    def __init__(self, write: Callable[[bytes], Any], *, spool_limit: int = 8 << 20,
                 write_block: int = WRITE_BLOCK) -> None:
        self._write = write
        self._write_block = write_block
        self._spool = tempfile.SpooledTemporaryFile(max_size=spool_limit)  # noqa: SIM115
        # An abandoned writer (failed flush) must not leak the spool or warn about it.
        self._release = weakref.finalize(self, self._spool.close)
        self._meta_len = 0
        self._meta_crc = 0
        self._chunks: list[ChunkIndex] = []
        self._last: tuple[str, int] | None = None
        self._open: tuple[ChunkBuilder, int] | None = None  # streamed chunk, its data_pos
        self._done = False
        self._pending: list[bytes] = []  # written on, in order, once write_block is reached
        self._pending_len = 0
        self._emit(OBJECT_HEADER.pack(OBJECT_MAGIC, FORMAT_VERSION, 0))
        self._pos = OBJECT_HEADER_SIZE

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the spool without finishing (idempotent; `finish` closes it too)."""
        self._done = True
        self._release()

    def _emit(self, data: bytes) -> None:
        if len(data) >= self._write_block:
            self._drain()
            self._write(data)
            return
        self._pending.append(data)
        self._pending_len += len(data)
        if self._pending_len >= self._write_block:
            self._drain()

    def _drain(self) -> None:
        """Write what is pending, as one block."""
        pending = self._pending
        if pending:
            self._write(pending[0] if len(pending) == 1 else b"".join(pending))
            self._pending = []
            self._pending_len = 0

    def _emit_data(self, batch: bytes) -> None:
        self._emit(batch)
        self._pos += len(batch)

    def _claim(self, topic: str, partition: int) -> None:
        if self._done:
            raise RuntimeError("writer already finished")
        if self._open is not None:
            raise RuntimeError("a streamed chunk is open: finish it and add() it first")
        key = (topic, partition)
        if self._last is not None and key <= self._last:
            raise ValueError(f"chunk {key} out of order after {self._last}")
        self._last = key

    def open_chunk(self, topic: str, partition: int, **builder_args: Any) -> ChunkBuilder:
        """A ChunkBuilder whose batches are written through immediately (bounded memory).

        Call `add(builder.finish())` before opening or adding the next chunk.
        """
        self._claim(topic, partition)
        builder = ChunkBuilder(topic, partition, sink=self._emit_data, **builder_args)
        self._open = (builder, self._pos)
        return builder

    def add(self, chunk: Chunk) -> None:
        """Write `chunk`'s batches now; (topic, partition) must strictly increase."""
        times = self._cleaned_at_of(chunk)
        if chunk.streamed:
            if self._open is None or (chunk.topic, chunk.partition) != (
                self._open[0].topic,
                self._open[0].partition,
            ):
                raise ValueError("streamed chunk does not belong to this writer's open chunk")
            data_pos = self._open[1]
            self._open = None
            if self._pos - data_pos != chunk.data_len:
                raise RuntimeError("streamed chunk length does not match the bytes written")
        else:
            self._claim(chunk.topic, chunk.partition)
            data_pos = self._pos
            for batch in chunk.batches:
                self._emit_data(batch)
        entry, hashes, crc = _encode_entry(chunk, times, data_pos, self._meta_len)
        hash_rel = self._meta_len + len(entry)
        record = b"".join((entry, hashes, crc)) if hashes else entry + crc
        self._spool.write(record)
        self._meta_crc = crc32c.crc32c(record, self._meta_crc)
        self._meta_len += len(record)
        index = ChunkIndex(
            topic=chunk.topic,
            partition=chunk.partition,
            base_offset=chunk.base_offset,
            data_pos=data_pos,
            data_len=chunk.data_len,
            hash_pos=hash_rel,  # made absolute in finish()
            hash_count=len(hashes) // KEY_HASH_SIZE,
            batch_count=chunk.batch_count,
            record_count=chunk.record_count,
            offset_span=chunk.offset_span,
            min_timestamp=chunk.min_timestamp,
            max_timestamp=chunk.max_timestamp,
            offsets=chunk.offsets,
            tombstones=chunk.tombstones,
            flags=chunk.flags,
            frame_crc=chunk.frame_crc,
            tombstone_cleaned_at=times,
        )
        self._chunks.append(index)

    @staticmethod
    def _cleaned_at_of(chunk: Chunk) -> np.ndarray[Any, np.dtype[np.int64]]:
        n = len(chunk.tombstones)
        if chunk.tombstone_cleaned_at is None:
            return _NO_TIMES if n == 0 else _frozen(np.zeros(n, dtype=np.int64))
        return _as_cleaned_at(chunk.tombstone_cleaned_at, n)

    def finish(self) -> FileLayout:
        """Write META and footer; returns the layout with absolute positions."""
        if self._done:
            raise RuntimeError("writer already finished")
        if self._open is not None:
            raise RuntimeError("a streamed chunk is still open")
        self._done = True
        meta_offset = self._pos
        data_length = meta_offset - OBJECT_HEADER_SIZE
        self._spool.seek(0)
        while block := self._spool.read(_COPY_BLOCK):
            self._emit(block)
        self._release()
        trailer = TRAILER.pack(len(self._chunks), self._meta_crc)
        self._emit(trailer)
        meta_crc = crc32c.crc32c(trailer, self._meta_crc)
        meta_length = self._meta_len + TRAILER.size
        head = FOOTER.pack(
            meta_offset,
            meta_length,
            OBJECT_HEADER_SIZE,
            data_length,
            meta_crc,
            len(self._chunks),
            FORMAT_VERSION,
            0,
            0,
            OBJECT_MAGIC,
        )[:FOOTER_CRC_POS]
        footer = (
            head
            + FOOTER.pack(0, 0, 0, 0, 0, 0, 0, 0, crc32c.crc32c(head), OBJECT_MAGIC)[
                FOOTER_CRC_POS:
            ]
        )
        self._emit(footer)
        self._drain()
        # The entries are this writer's own, unseen until now: make hash_pos absolute in
        # place (dataclasses.replace costs ~10 µs a chunk, 1,000 chunks per agent flush).
        for c in self._chunks:
            object.__setattr__(c, "hash_pos", meta_offset + c.hash_pos)
        chunks = self._chunks
        return FileLayout(
            size=meta_offset + meta_length + FOOTER_SIZE,
            data_offset=OBJECT_HEADER_SIZE,
            data_length=data_length,
            meta_offset=meta_offset,
            meta_length=meta_length,
            meta_crc=meta_crc,
            chunks=chunks,
        )


def encode_file(chunks: Iterable[Chunk]) -> tuple[bytes, FileLayout]:
    """Encode a whole object in memory (tests, tools, small objects)."""
    out = io.BytesIO()
    writer = FileWriter(out.write)
    for chunk in chunks:
        writer.add(chunk)
    layout = writer.finish()
    return out.getvalue(), layout


# ---------------------------------------------------------------------------------------
# reading


def _read_exact(stream: Readable, n: int, what: str) -> bytes:
    """Read exactly n bytes or raise TruncatedError."""
    data = stream.read(n)
    if len(data) == n:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = stream.read(n - got)
        if not more:
            raise TruncatedError(f"stream ended after {got} of {n} bytes of {what}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _decode_tombstones(raw: bytes) -> tuple[BitMap, np.ndarray[Any, np.dtype[np.int64]]]:
    """The tombstone block: bitmap and per-tombstone first-cleaned times."""
    if len(raw) < TOMB_HEAD.size:
        raise CorruptDataError("tombstone block shorter than its header")
    (blen,) = TOMB_HEAD.unpack_from(raw)
    if blen > len(raw) - TOMB_HEAD.size:
        raise CorruptDataError("tombstone bitmap length outside its block")
    bitmap = _deserialize(raw[TOMB_HEAD.size : TOMB_HEAD.size + blen], "tombstones")
    tail = raw[TOMB_HEAD.size + blen :]
    if not tail:
        return bitmap, _NO_TIMES if not bitmap else _frozen(np.zeros(len(bitmap), np.int64))
    if len(tail) != CLEANED_AT_DTYPE.itemsize * len(bitmap):
        raise CorruptDataError(f"tombstone times: {len(tail)} bytes for {len(bitmap)} tombstones")
    stored = np.frombuffer(tail, dtype=CLEANED_AT_DTYPE)
    if int(stored.max()) >= 2**63:
        raise CorruptDataError("tombstone first-cleaned time beyond 2**63 - 1 ms")
    return bitmap, _frozen(stored.astype(np.int64))


def _deserialize(raw: bytes, what: str) -> BitMap:
    try:
        return BitMap.deserialize(raw)
    except Exception as exc:  # pyroaring raises ValueError/OverflowError on bad input
        raise CorruptDataError(f"{what} bitmap does not deserialize: {exc}") from exc


class EntryHashes:
    """The key hashes of one META entry, read forward in blocks (`iter_meta_streamed`).

    The entry's CRC covers them and is checked once the last one is read; whatever the
    consumer leaves unread is read (and checked) before the next entry.
    """

    __slots__ = ("_crc", "_left", "_running", "_stream", "_where", "count")

    def __init__(self, stream: Readable, count: int, crc: int, running: int, where: str) -> None:
        self._stream = stream
        self._left = count * KEY_HASH_SIZE
        self._crc = crc
        self._running = running
        self._where = where
        self.count = count
        """How many hashes the entry holds."""
        if not self._left:
            self._check()

    @property
    def remaining(self) -> int:
        """Hashes not read yet."""
        return self._left // KEY_HASH_SIZE

    def read(self, max_hashes: int) -> bytes:
        """Up to `max_hashes` next hashes (16 bytes each); b"" once all were read."""
        n = min(self._left, max(max_hashes, 1) * KEY_HASH_SIZE)
        if not n:
            return b""
        data = _read_exact(self._stream, n, f"{self._where} key hashes")
        self._crc = crc32c.crc32c(data, self._crc)
        self._running = crc32c.crc32c(data, self._running)
        self._left -= n
        if not self._left:
            self._check()
        return data

    def read_all(self) -> bytes:
        """Every hash not read yet."""
        return self.read(self.remaining) if self._left else b""

    def _check(self) -> None:
        raw = _read_exact(self._stream, ENTRY_CRC.size, f"{self._where} CRC")
        (stored,) = ENTRY_CRC.unpack(raw)
        if self._crc != stored:
            raise CorruptDataError(f"{self._where}: CRC32C {self._crc:#010x} != {stored:#010x}")
        self._running = crc32c.crc32c(raw, self._running)
        self._crc = -1  # checked

    def _finish(self) -> int:
        """Read what is left; the running CRC of the META section after this entry."""
        while self._left:
            self.read(_COPY_BLOCK // KEY_HASH_SIZE)
        return self._running


def iter_meta(
    stream: Readable,
    meta_offset: int,
    meta_length: int,
    *,
    expected_crc: int | None = None,
) -> Iterator[tuple[ChunkIndex, bytes]]:
    """Yield (ChunkIndex, key_hashes) from a stream positioned at the META section.

    Reads exactly `meta_length` bytes forward-only. Each entry is CRC-checked before it is
    yielded; the trailer (chunk count + CRC of all entries) and, if given, the footer's
    `expected_crc` of the whole section are checked at the end.
    """
    for index, hashes in iter_meta_streamed(stream, meta_offset, meta_length,
                                            expected_crc=expected_crc):
        yield index, hashes.read_all()


def iter_meta_streamed(
    stream: Readable,
    meta_offset: int,
    meta_length: int,
    *,
    expected_crc: int | None = None,
) -> Iterator[tuple[ChunkIndex, EntryHashes]]:
    """`iter_meta` without holding an entry's key hashes: yield (ChunkIndex, EntryHashes)
    as soon as an entry's fixed part, topic, offsets and tombstones are read; the hashes
    are then read in blocks as the consumer asks (memory per block, not per chunk). The
    entry's CRC is checked after its last hash, so its index is not trustworthy until the
    consumer read every hash (or the next entry was asked for)."""
    if meta_length < TRAILER.size:
        raise CorruptDataError(f"meta section of {meta_length} bytes cannot hold its trailer")
    end = meta_length - TRAILER.size
    pos = 0
    running = 0
    count = 0
    prev: tuple[str, int] | None = None
    next_data = OBJECT_HEADER_SIZE
    var_fixed = ENTRY.size + ENTRY_CRC.size
    while pos < end:
        if end - pos < var_fixed:
            raise CorruptDataError(f"meta entry at {pos}: {end - pos} bytes left, too short")
        fixed = _read_exact(stream, ENTRY.size, f"meta entry at {pos}")
        (
            size,
            partition,
            base,
            data_pos,
            data_len,
            hash_rel,
            hash_count,
            batch_count,
            record_count,
            span,
            min_ts,
            max_ts,
            frame_crc,
            flags,
            topic_len,
            offsets_len,
            tombs_len,
        ) = ENTRY.unpack(fixed)
        if size < var_fixed or size > end - pos:
            raise CorruptDataError(f"meta entry at {pos}: size {size} outside the section")
        hashes_len = size - var_fixed - topic_len - offsets_len - tombs_len
        if hashes_len != hash_count * KEY_HASH_SIZE:
            raise CorruptDataError(f"meta entry at {pos}: field lengths do not add up to {size}")
        head_len = topic_len + offsets_len + tombs_len
        rest = _read_exact(stream, head_len, f"meta entry at {pos}")
        crc = crc32c.crc32c(rest, crc32c.crc32c(fixed))
        running = crc32c.crc32c(rest, crc32c.crc32c(fixed, running))
        view = memoryview(rest)
        try:
            topic = bytes(view[:topic_len]).decode()
        except UnicodeDecodeError as exc:
            raise CorruptDataError(f"meta entry at {pos}: topic is not utf-8") from exc
        cut = topic_len + offsets_len
        offsets = _deserialize(bytes(view[topic_len:cut]), "offsets")
        tombstones, cleaned_at = _decode_tombstones(bytes(view[cut : cut + tombs_len]))
        where = f"meta entry {count} ({topic!r}, {partition})"
        key = (topic, partition)
        if prev is not None and key <= prev:
            raise CorruptDataError(f"{where}: chunks out of order after {prev}")
        if data_pos != next_data:
            raise CorruptDataError(f"{where}: data_pos {data_pos}, expected {next_data}")
        if hash_rel != pos + ENTRY.size + cut + tombs_len:
            raise CorruptDataError(f"{where}: hash position does not match the entry")
        _check_index_semantics(
            where,
            flags,
            record_count,
            hash_count,
            batch_count,
            data_len,
            span,
            offsets,
            tombstones,
        )
        prev = key
        next_data = data_pos + data_len
        index = ChunkIndex(
            topic,
            partition,
            base,
            data_pos,
            data_len,
            meta_offset + hash_rel,
            hash_count,
            batch_count,
            record_count,
            span,
            min_ts,
            max_ts,
            offsets,
            tombstones,
            flags,
            frame_crc,
            cleaned_at,
        )
        hashes = EntryHashes(stream, hash_count, crc, running, where)
        pos += size
        count += 1
        yield index, hashes
        running = hashes._finish()
    if pos != end:
        raise CorruptDataError(f"meta entries overrun the trailer by {pos - end} bytes")
    trailer = _read_exact(stream, TRAILER.size, "meta trailer")
    stored_count, stored_crc = TRAILER.unpack(trailer)
    if stored_crc != running:
        raise CorruptDataError(f"meta entries CRC32C {running:#010x} != {stored_crc:#010x}")
    if stored_count != count:
        raise CorruptDataError(f"meta trailer says {stored_count} chunks, read {count}")
    if next_data != meta_offset:
        raise CorruptDataError(f"chunks end at {next_data}, meta starts at {meta_offset}")
    if expected_crc is not None:
        whole = crc32c.crc32c(trailer, running)
        if whole != expected_crc:
            raise CorruptDataError(f"meta section CRC32C {whole:#010x} != {expected_crc:#010x}")


def _check_index_semantics(
    where: str,
    flags: int,
    record_count: int,
    hash_count: int,
    batch_count: int,
    data_len: int,
    span: int,
    offsets: BitMap,
    tombstones: BitMap,
) -> None:
    """Invariants every entry written by ChunkBuilder satisfies."""
    if flags & ~_KNOWN_FLAGS:
        raise CorruptDataError(f"{where}: unknown flags {flags:#x}")
    if len(offsets) != record_count:
        raise CorruptDataError(f"{where}: {len(offsets)} offsets for {record_count} records")
    if (offsets and offsets.max() >= span) or span > MAX_OFFSET_SPAN:
        raise CorruptDataError(f"{where}: offsets reach beyond offset_span {span}")
    if not tombstones.issubset(offsets):
        raise CorruptDataError(f"{where}: tombstones outside the present offsets")
    if flags & FLAG_KEYED:
        if hash_count != record_count:
            raise CorruptDataError(f"{where}: {hash_count} key hashes for {record_count} records")
    elif hash_count or tombstones:
        raise CorruptDataError(f"{where}: key hashes/tombstones in an unkeyed chunk")
    if (record_count == 0) != (batch_count == 0) or (batch_count == 0) != (data_len == 0):
        raise CorruptDataError(f"{where}: empty/non-empty mismatch of records, batches, data")


def _walk_chunk(
    data: Any, offset_span: int | None, index: ChunkIndex | None
) -> list[tuple[BatchHeader, memoryview]]:
    """Verify every batch of a chunk and its framing; the list is safe to decode."""
    view = memoryview(data)
    if index is not None:
        if len(view) != index.data_len:
            raise CorruptDataError(f"chunk is {len(view)} bytes, index says {index.data_len}")
        offset_span = index.offset_span
    out: list[tuple[BatchHeader, memoryview]] = []
    pos = 0
    end = len(view)
    next_rel = 0
    records = 0
    frame = 0
    while pos < end:
        header = read_header(view, pos)
        if header.base_offset < next_rel:
            raise CorruptDataError(
                f"batch at {pos}: base offset {header.base_offset} below {next_rel}"
            )
        next_rel = header.next_offset
        if offset_span is not None and next_rel > offset_span:
            raise CorruptDataError(f"batch at {pos}: offsets reach {next_rel} > span {offset_span}")
        check_batch(view, header, pos)
        frame = crc32c.crc32c(view[pos : pos + FRAME_SIZE], frame)
        out.append((header, view[pos : pos + header.length]))
        records += header.record_count
        pos += header.length
    if index is not None:
        if frame != index.frame_crc:
            raise CorruptDataError(
                f"chunk ({index.topic!r}, {index.partition}): batch framing CRC32C "
                f"{frame:#010x} != {index.frame_crc:#010x}"
            )
        if len(out) != index.batch_count or records != index.record_count:
            raise CorruptDataError(
                f"chunk ({index.topic!r}, {index.partition}): {len(out)} batches / {records} "
                f"records, index says {index.batch_count} / {index.record_count}"
            )
    return out


def verify_chunk(data: Any, index: ChunkIndex) -> None:
    """Check a chunk's bytes against its index entry (CRCs, framing, counts)."""
    _walk_chunk(data, None, index)


def iter_chunk_records(
    data: Any,
    base_offset: int,
    offset_span: int | None = None,
    *,
    index: ChunkIndex | None = None,
) -> Iterator[Record]:
    """Decode a chunk's records with absolute offsets (base_offset + relative).

    All batches are verified before the first record is yielded. Pass `index` to also check
    the framing CRC and counts (recommended: without it a corrupted baseOffset that stays
    inside the span cannot be told apart from a real one).
    """
    for header, view in _walk_chunk(data, offset_span, index):
        yield from iter_records(view, header, base_offset)


class DataReader:
    """Reads the DATA section chunk by chunk from a forward-only stream."""

    def __init__(self, stream: Readable, data_offset: int = OBJECT_HEADER_SIZE) -> None:
        self._stream = stream
        self._pos = data_offset

    @property
    def position(self) -> int:
        """Absolute object position of the next unread byte."""
        return self._pos

    def _discard(self, n: int) -> None:
        while n > 0:
            step = min(n, _COPY_BLOCK)
            _read_exact(self._stream, step, "skipped data")
            n -= step

    def _advance_to(self, index: ChunkIndex) -> None:
        if index.data_pos < self._pos:
            raise ValueError(f"chunk at {index.data_pos} is behind the stream position {self._pos}")
        gap = index.data_pos - self._pos
        self._discard(gap)
        self._pos += gap

    def read_chunk(self, index: ChunkIndex) -> bytes:
        """Read and verify one chunk's batches (skipping forward to it if needed)."""
        data = self._read(index)
        verify_chunk(data, index)
        return data

    def read_batches(self, index: ChunkIndex) -> list[tuple[BatchHeader, memoryview]]:
        """`read_chunk`, returning its verified batches as (header, view) slices of it."""
        return _walk_chunk(self._read(index), None, index)

    def _read(self, index: ChunkIndex) -> bytes:
        self._advance_to(index)
        data = _read_exact(self._stream, index.data_len, f"chunk {index.topic!r}")
        self._pos += index.data_len
        return data

    def skip_chunk(self, index: ChunkIndex) -> None:
        """Read past one chunk without keeping or verifying it."""
        self._advance_to(index)
        self._discard(index.data_len)
        self._pos += index.data_len


def parse_footer(tail: bytes) -> Footer:
    """Parse the footer from the last FOOTER_SIZE (or more) bytes of an object."""
    if len(tail) < FOOTER_SIZE:
        raise TruncatedError(f"footer needs {FOOTER_SIZE} bytes, got {len(tail)}")
    raw = tail[len(tail) - FOOTER_SIZE :]
    (
        meta_offset,
        meta_length,
        data_offset,
        data_length,
        meta_crc,
        chunk_count,
        version,
        reserved,
        footer_crc,
        magic,
    ) = FOOTER.unpack(raw)
    if magic != OBJECT_MAGIC:
        raise CorruptDataError(f"footer magic {magic!r}, expected {OBJECT_MAGIC!r}")
    actual = crc32c.crc32c(raw[:FOOTER_CRC_POS])
    if actual != footer_crc:
        raise CorruptDataError(f"footer CRC32C {actual:#010x} != {footer_crc:#010x}")
    if version != FORMAT_VERSION:
        raise UnsupportedError(f"object format version {version}")
    if reserved != 0 or data_offset != OBJECT_HEADER_SIZE:
        raise CorruptDataError("footer reserved field or data offset invalid")
    if data_offset + data_length != meta_offset:
        raise CorruptDataError("footer: data section does not end where meta starts")
    return Footer(
        meta_offset, meta_length, data_offset, data_length, meta_crc, chunk_count, version
    )


def check_object_header(head: bytes, version: int = FORMAT_VERSION) -> None:
    """Check the 8-byte object header (magic, version, zero flags)."""
    if len(head) < OBJECT_HEADER_SIZE:
        raise TruncatedError(f"object header needs {OBJECT_HEADER_SIZE} bytes")
    magic, found, flags = OBJECT_HEADER.unpack_from(head)
    if magic != OBJECT_MAGIC or found != version or flags != 0:
        raise CorruptDataError(f"bad object header {bytes(head[:OBJECT_HEADER_SIZE])!r}")


def read_object(data: bytes) -> tuple[FileLayout, list[tuple[ChunkIndex, bytes]]]:
    """Fully verify an in-memory object; returns its layout and (index, key hashes) pairs."""
    footer = parse_footer(data)
    if footer.meta_offset + footer.meta_length + FOOTER_SIZE != len(data):
        raise CorruptDataError(
            f"footer describes {footer.meta_offset + footer.meta_length + FOOTER_SIZE} "
            f"bytes, object has {len(data)}"
        )
    view = memoryview(data)
    return _verify(io.BytesIO(view[footer.meta_offset :]), io.BytesIO(view[: footer.meta_offset]),
                   len(data), footer.meta_offset, keep_hashes=True)


def verify_streams(tail: Readable, head: Readable, size: int, meta_offset: int) -> FileLayout:
    """Fully verify an object of `size` bytes read as two forward-only streams, `tail` over
    [meta_offset, size) (META, then the footer) and `head` over [0, meta_offset) (header,
    then DATA): every check of `read_object`, holding one chunk at a time (and the index).

    `meta_offset` is where the caller believes META starts (a file row's); a footer saying
    otherwise is CorruptDataError, as is any failed check (TruncatedError: a stream ended).
    """
    return _verify(tail, head, size, meta_offset, keep_hashes=False)[0]


class _Checksummed:
    """A Readable that keeps the CRC32C of every byte read through it."""

    def __init__(self, stream: Readable) -> None:
        self._stream = stream
        self.crc = 0

    def read(self, n: int, /) -> bytes:
        data = self._stream.read(n)
        self.crc = crc32c.crc32c(data, self.crc)
        return data


def _verify(tail: Readable, head: Readable, size: int, meta_offset: int, *,
            keep_hashes: bool) -> tuple[FileLayout, list[tuple[ChunkIndex, bytes]]]:
    """`read_object` and `verify_streams`: META (each entry, its trailer and the section's
    CRC), the footer against where META was read, the header, then every chunk's batches
    against its index entry; the key hashes are kept only with `keep_hashes`."""
    meta_length = size - FOOTER_SIZE - meta_offset
    if meta_offset < OBJECT_HEADER_SIZE or meta_length < 0:
        raise CorruptDataError(f"meta at {meta_offset} of a {size}-byte object")
    meta = _Checksummed(tail)
    entries = [(index, hashes if keep_hashes else b"")
               for index, hashes in iter_meta(meta, meta_offset, meta_length)]
    footer = parse_footer(_read_exact(tail, FOOTER_SIZE, "footer"))
    if (footer.meta_offset, footer.meta_length) != (meta_offset, meta_length):
        raise CorruptDataError(
            f"footer places meta at {footer.meta_offset} ({footer.meta_length} bytes),"
            f" read at {meta_offset} ({meta_length} bytes)"
        )
    if meta.crc != footer.meta_crc:
        raise CorruptDataError(f"meta section CRC32C {meta.crc:#010x} != {footer.meta_crc:#010x}")
    if len(entries) != footer.chunk_count:
        raise CorruptDataError(f"footer says {footer.chunk_count} chunks, meta has {len(entries)}")
    check_object_header(_read_exact(head, OBJECT_HEADER_SIZE, "object header"), footer.version)
    data = DataReader(head, footer.data_offset)
    for index, _ in entries:  # the chunks tile the data section (checked by iter_meta)
        data.read_chunk(index)
    layout = FileLayout(
        size=size,
        data_offset=footer.data_offset,
        data_length=footer.data_length,
        meta_offset=footer.meta_offset,
        meta_length=footer.meta_length,
        meta_crc=footer.meta_crc,
        chunks=[c for c, _ in entries],
    )
    return layout, entries
