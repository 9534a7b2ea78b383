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

Chunks are built by `fileformat.chunkbuilder` and objects written by
`fileformat.filewriter`. Readers are forward-only: `fileformat.metareader.iter_meta` reads the
META section as one sequential stream (`iter_meta_streamed`: the same, with each entry's key
hashes read in blocks as the consumer asks) and `fileformat.datareader.DataReader` reads the
DATA section chunk by chunk; neither seeks. `fileformat.verify` checks a whole object. This
module holds the layout itself: its structs, the data model, the fixed header and footer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

import crc32c
import numpy as np
from pyroaring import BitMap

from fileformat.errors import CorruptDataError, TruncatedError, UnsupportedError
from fileformat.keyhash import KEY_HASH_SIZE

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
KNOWN_FLAGS = FLAG_KEYED
MAX_OFFSET_SPAN = 2**32  # relative offsets live in 32-bit roaring bitmaps


# ---------------------------------------------------------------------------------------
# first-cleaned times of tombstones: validated, read-only int64 arrays


def read_only(arr: np.ndarray[Any, np.dtype[np.int64]]) -> np.ndarray[Any, np.dtype[np.int64]]:
    arr.flags.writeable = False
    return arr


NO_TIMES = read_only(np.zeros(0, dtype=np.int64))


def as_cleaned_at(values: Any, n: int) -> np.ndarray[Any, np.dtype[np.int64]]:
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
    return read_only(times)


# ---------------------------------------------------------------------------------------
# data model


@dataclass(frozen=True, slots=True)
class ChunkStats:
    """What one chunk holds, wherever it is placed: the fields a built `Chunk` and the
    `ChunkIndex` the META section says of it share (the one definition of them)."""

    topic: str
    partition: int
    base_offset: int
    data_len: int
    batch_count: int
    record_count: int
    offset_span: int
    min_timestamp: int
    max_timestamp: int
    offsets: BitMap = field(compare=False, repr=False)
    tombstones: BitMap = field(compare=False, repr=False)
    flags: int = 0
    frame_crc: int = 0


STATS_FIELDS = tuple(f.name for f in fields(ChunkStats))
stats_of = attrgetter(*STATS_FIELDS)
"""A chunk's `ChunkStats` values, in field order (for building a `ChunkIndex` from a `Chunk`
positionally: no per-field spelling, no `dataclasses.replace` cost)."""


@dataclass(frozen=True, slots=True)
class ChunkIndex(ChunkStats):
    """What the META section says about one chunk (its key hashes travel separately): its
    `ChunkStats` and where it is in the object."""

    data_pos: int = field(kw_only=True)
    hash_pos: int = field(kw_only=True)
    hash_count: int = field(kw_only=True)
    tombstone_cleaned_at: np.ndarray[Any, np.dtype[np.int64]] = field(
        default_factory=lambda: read_only(np.zeros(0, dtype=np.int64)), compare=False,
        repr=False, kw_only=True)
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
class Sections:
    """Where an object's DATA and META sections are: what its footer says, what its file
    row records, what a reader opens (the one definition of these fields)."""

    data_offset: int
    data_length: int
    meta_offset: int
    meta_length: int


@dataclass(frozen=True, slots=True)
class ObjectLayout(Sections):
    """An object's sections and size: what its file row records once it is committed."""

    size: int = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class FileLayout(ObjectLayout):
    """Where things are in a written object: what the metadata store records (an
    `ObjectLayout`), the META section's CRC and the chunks' indexes."""

    meta_crc: int = field(kw_only=True)
    chunks: list[ChunkIndex] = field(kw_only=True)


SECTION_FIELDS = tuple(f.name for f in fields(Sections))
sections_of = attrgetter(*SECTION_FIELDS)
"""A `Sections`' values in field order (to build a larger layout from a smaller one)."""


@dataclass(frozen=True, slots=True)
class Footer(Sections):
    """The fixed-size tail of an object: its sections, the META CRC, chunk count, version."""

    meta_crc: int
    chunk_count: int
    version: int


@dataclass(frozen=True, slots=True)
class Chunk(ChunkStats):
    """A finished chunk from `ChunkBuilder.finish`, ready for `FileWriter.add`: its
    `ChunkStats`, its batches and key hashes."""

    batches: list[bytes] = field(kw_only=True)
    key_hashes: bytes = field(kw_only=True)
    streamed: bool = False
    """True if the batches already went to a FileWriter (see `FileWriter.open_chunk`)."""
    tombstone_cleaned_at: np.ndarray[Any, np.dtype[np.int64]] | None = None
    """Per tombstone first-cleaned ms in bitmap order (see `ChunkIndex`); None = all 0."""


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
        data_offset, data_length, meta_offset, meta_length, meta_crc, chunk_count, version
    )


def check_object_header(head: bytes, version: int = FORMAT_VERSION) -> None:
    """Check the 8-byte object header (magic, version, zero flags)."""
    if len(head) < OBJECT_HEADER_SIZE:
        raise TruncatedError(f"object header needs {OBJECT_HEADER_SIZE} bytes")
    magic, found, flags = OBJECT_HEADER.unpack_from(head)
    if magic != OBJECT_MAGIC or found != version or flags != 0:
        raise CorruptDataError(f"bad object header {bytes(head[:OBJECT_HEADER_SIZE])!r}")
