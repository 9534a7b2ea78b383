"""Kafka RecordBatch v2 (magic 2): the header, framing, verify, decode, re-base.

Records are decoded by aiokafka's C-accelerated reader, always UNCOMPRESSED: a compressed
records section is decompressed first (`fileformat.compression`). Batches are built by
`fileformat.encoder`, filtered record by record by `fileformat.filter`, and a producer's
batch is checked as Kafka checks it by `fileformat.validate`.

Byte layout (big-endian; `pos` relative to the batch start)::

    pos  size  field                  covered by CRC
    0    8     baseOffset   int64      no  (patched when a batch is stored / re-based)
    8    4     length       int32      no  (bytes after this field: total - 12)
    12   4     leaderEpoch  int32      no  (unused by siltstream, kept as written)
    16   1     magic        int8       no  (must be 2)
    17   4     crc          uint32     -   (CRC32C of bytes 21..end)
    21   2     attributes   int16      yes (bits 0-2 codec, 3 timestamp type,
                                            4 transactional, 5 control)
    23   4     lastOffsetDelta int32   yes
    27   8     firstTimestamp int64    yes
    35   8     maxTimestamp int64      yes
    43   8     producerId   int64      yes
    51   2     producerEpoch int16     yes
    53   4     baseSequence int32      yes
    57   4     recordCount  int32      yes
    61   ...   records (compressed as one blob after byte 61 when codec != 0)

The four fields before the CRC are not checksummed by Kafka; the object format covers them
with a per-chunk "frame CRC" in the index (see `fileformat.objectfile`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import crc32c
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch

from fileformat.compression import Compression, decompress_into, output_buffer
from fileformat.errors import CorruptDataError, TruncatedError, UnsupportedError

HEADER = struct.Struct(
    ">"
    "q"  # baseOffset: offset of the record with delta 0
    "i"  # length: bytes following this field
    "i"  # partitionLeaderEpoch: not checksummed, unused here
    "b"  # magic: 2
    "I"  # crc: CRC32C over attributes..end
    "h"  # attributes: codec | timestamp type | transactional | control
    "i"  # lastOffsetDelta: delta of the last record
    "q"  # firstTimestamp: timestamp of the first record
    "q"  # maxTimestamp: largest record timestamp
    "q"  # producerId: -1 when not idempotent
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount: records in the batch
)
HEADER_SIZE = HEADER.size  # 61
BASE_OFFSET_POS = 0
LENGTH_POS = struct.calcsize(">q")
LEADER_EPOCH_POS = struct.calcsize(">qi")
MAGIC_POS = struct.calcsize(">qii")
CRC_POS = struct.calcsize(">qiib")
ATTRIBUTES_POS = struct.calcsize(">qiibI")
LAST_OFFSET_DELTA_POS = struct.calcsize(">qiibIh")
MAX_TIMESTAMP_POS = struct.calcsize(">qiibIhiq")
RECORD_COUNT_POS = struct.calcsize(">qiibIhiqqqhi")
LOG_OVERHEAD = LENGTH_POS + struct.calcsize(">i")  # bytes not counted by `length`: 12
FRAME_SIZE = CRC_POS  # bytes before the CRC (not covered by it): 17
MAGIC = 2
MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

BASE_OFFSET_FIELD = struct.Struct(">q")
LENGTH_FIELD = struct.Struct(">i")
LEADER_EPOCH_FIELD = struct.Struct(">i")
CRC_FIELD = struct.Struct(">I")
ATTRIBUTES_FIELD = struct.Struct(">h")
TIMESTAMP_FIELD = struct.Struct(">q")

_CODECS = tuple(sorted(Compression))  # by codec id: _CODECS[id] is Compression(id)


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with its absolute offset."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class BatchHeader(NamedTuple):
    """The 61-byte header of a batch; `length` is the TOTAL batch size in bytes. A named
    tuple: one is made for every batch a produce checks or a reader walks, and a frozen
    dataclass's field-by-field __init__ costs ~1 us more each."""

    base_offset: int
    length: int
    leader_epoch: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> Compression:
        """The codec; raises UnsupportedError for ids 5-7."""
        codec = self.attributes & CODEC_MASK
        if codec < len(_CODECS):
            return _CODECS[codec]  # hot: an Enum call costs ~1 µs
        raise UnsupportedError(f"unknown compression codec {codec}")

    @property
    def is_control(self) -> bool:
        """Whether this is a transaction marker batch."""
        return bool(self.attributes & CONTROL_MASK)

    @property
    def timestamp_type(self) -> int:
        """Kafka's timestamp type id: 0 CreateTime, 1 LogAppendTime (the attributes bit)."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        """Whether the producer wrote it inside a transaction."""
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def next_offset(self) -> int:
        """The offset after the batch's last offset."""
        return self.base_offset + self.last_offset_delta + 1


RecordTuple = tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
"""(offset_delta, timestamp, key, value, headers) as accepted by `build_batch`."""


def read_header(buf: Any, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos` and check framing (magic, length fits `buf`); no CRC check."""
    end = len(buf)
    if pos + HEADER_SIZE > end:
        raise TruncatedError(f"batch header at {pos} needs {HEADER_SIZE} bytes, {end - pos} left")
    (base, length, epoch, magic, crc, attrs, lod, first_ts, max_ts, pid, pep, bseq, count) = (
        HEADER.unpack_from(buf, pos)
    )
    if magic != MAGIC:
        raise CorruptDataError(f"batch at {pos}: magic {magic}, expected {MAGIC}")
    if length < MIN_LENGTH:
        raise CorruptDataError(f"batch at {pos}: length {length} below minimum {MIN_LENGTH}")
    total = length + LOG_OVERHEAD
    if pos + total > end:
        raise TruncatedError(f"batch at {pos}: {total} bytes declared, {end - pos} available")
    if count < 0 or lod < 0:
        raise CorruptDataError(f"batch at {pos}: negative record count or last offset delta")
    return BatchHeader(base, total, epoch, crc, attrs, lod, first_ts, max_ts, pid, pep, bseq, count)


def check_batch(view: memoryview, header: BatchHeader, pos: int = 0) -> None:
    """The checks `verify_batch` makes past `read_header`: CRC, then a known codec."""
    actual = crc32c.crc32c(view[pos + ATTRIBUTES_POS : pos + header.length])
    if actual != header.crc:
        raise CorruptDataError(
            f"batch at {pos}: CRC32C {actual:#010x} != stored {header.crc:#010x}"
        )
    header.compression  # noqa: B018 - raises UnsupportedError on a bad codec (CRC is fine)


def verify_batch(buf: Any, pos: int = 0) -> BatchHeader:
    """Check framing and CRC of the batch at `pos`; return its header."""
    view = memoryview(buf)
    header = read_header(view, pos)
    check_batch(view, header, pos)
    return header


def iter_batches(buf: Any) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Split a concatenation of batches, verifying each; yields views (no copies)."""
    view = memoryview(buf)
    pos = 0
    end = len(view)
    while pos < end:
        header = verify_batch(view, pos)
        yield header, view[pos : pos + header.length]
        pos += header.length


def split_frames(buf: Any) -> Iterator[memoryview]:
    """Split a concatenation of batches by their length prefixes only (no CRC or header
    checks: what a produce request's records field needs before each batch is checked)."""
    view = memoryview(buf)
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptDataError(f"truncated batch header at {pos}")
        size = LENGTH_FIELD.unpack_from(view, pos + LENGTH_POS)[0]
        total = size + LOG_OVERHEAD
        if size <= 0 or pos + total > end:
            raise CorruptDataError(f"batch at {pos} declares {size} bytes, {end - pos} left")
        yield view[pos:pos + total]
        pos += total


def split_batches(buf: bytes) -> list[bytes]:
    """`split_frames` as bytes; a buffer holding exactly one batch (what a producer's
    records field holds) is returned whole: no walk and, for bytes, no copy."""
    if len(buf) > LOG_OVERHEAD and (
            LENGTH_FIELD.unpack_from(buf, LENGTH_POS)[0] + LOG_OVERHEAD == len(buf)):
        return [bytes(buf)]
    return [bytes(frame) for frame in split_frames(buf)]


def seal_crc(batch: bytearray) -> None:
    """Store the CRC32C of `batch` (attributes to its end): the last write to a batch whose
    checksummed fields or records changed."""
    CRC_FIELD.pack_into(batch, CRC_POS, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_POS:]))


def stamp_log_append_time(batch: bytes, now_ms: int) -> bytes:
    """Copy `batch` as Kafka's broker appends it to a LogAppendTime topic: the timestamp
    type bit set and maxTimestamp = `now_ms` (every record's timestamp for readers), the CRC
    recomputed (records untouched)."""
    out = bytearray(batch)
    attributes = ATTRIBUTES_FIELD.unpack_from(out, ATTRIBUTES_POS)[0]
    ATTRIBUTES_FIELD.pack_into(out, ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    TIMESTAMP_FIELD.pack_into(out, MAX_TIMESTAMP_POS, now_ms)
    seal_crc(out)
    return bytes(out)


def with_base_offset(batch: Any, base_offset: int) -> bytes:
    """Copy `batch` with baseOffset replaced (baseOffset is outside the CRC range)."""
    return b"".join((BASE_OFFSET_FIELD.pack(base_offset), memoryview(batch)[LENGTH_POS:]))


def rebase_in_place(buf: bytearray, shift: int, leader_epoch: int = -1) -> None:
    """Add `shift` to the baseOffset of every batch in `buf` (a concatenation of batches,
    split by their length prefixes only) and set their partitionLeaderEpoch: both outside
    the CRC range, so the batches stay valid. Per batch, never per record."""
    pos, end = 0, len(buf)
    while pos + LOG_OVERHEAD <= end:
        BASE_OFFSET_FIELD.pack_into(buf, pos, BASE_OFFSET_FIELD.unpack_from(buf, pos)[0] + shift)
        LEADER_EPOCH_FIELD.pack_into(buf, pos + LEADER_EPOCH_POS, leader_epoch)
        pos += LENGTH_FIELD.unpack_from(buf, pos + LENGTH_POS)[0] + LOG_OVERHEAD


def uncompressed_view(view: memoryview, header: BatchHeader,
                      limit: int | None = None) -> memoryview:
    """The batch itself if uncompressed, else a reassembled uncompressed copy (CRC unchanged:
    it covers the compressed bytes) whose records section is at most `limit` bytes. The
    records are decompressed straight after the copied header, so no further copy is made."""
    codec = header.compression
    if codec == Compression.NONE:
        return view
    buf = output_buffer(HEADER_SIZE, limit)
    size = HEADER_SIZE + decompress_into(view[HEADER_SIZE:], codec, buf[HEADER_SIZE:], limit)
    out = buf[:size]
    out[:HEADER_SIZE] = view[:HEADER_SIZE]
    LENGTH_FIELD.pack_into(out, LENGTH_POS, size - LOG_OVERHEAD)
    ATTRIBUTES_FIELD.pack_into(out, ATTRIBUTES_POS, header.attributes & ~CODEC_MASK)
    return out


def iter_records(view: memoryview, header: BatchHeader, offset_shift: int = 0) -> Iterator[Record]:
    """Decode a VERIFIED batch; record offset = baseOffset + delta + `offset_shift`."""
    plain = uncompressed_view(view, header)
    count = 0
    last = header.base_offset - 1  # a producer's baseOffset may be anything, negatives too
    try:
        for rec in DefaultRecordBatch(plain):
            offset = rec.offset
            if offset <= last:
                raise CorruptDataError(f"batch at offset {header.base_offset}: offsets not rising")
            last = offset
            count += 1
            yield Record(
                offset + offset_shift, rec.timestamp, rec.key, rec.value, tuple(rec.headers)
            )
    except (CorruptRecordException, UnicodeDecodeError, ValueError) as exc:
        raise CorruptDataError(f"batch at offset {header.base_offset}: {exc}") from exc
    if count != header.record_count:
        raise CorruptDataError(
            f"batch at offset {header.base_offset}: {count} records, header says "
            f"{header.record_count}"
        )
    if count and last != header.base_offset + header.last_offset_delta:
        raise CorruptDataError(
            f"batch at offset {header.base_offset}: last record offset {last} does not match "
            f"lastOffsetDelta {header.last_offset_delta}"
        )


def read_varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """Zigzag varint (Kafka's varint/varlong) at `pos`, at most 10 bytes, none at or past
    `end`: (value as a signed 64-bit int, position after it)."""
    result = shift = 0
    while shift < 70:
        if pos >= end:
            raise CorruptDataError("record varint runs past its bounds")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            result &= _U64
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise CorruptDataError("record varint longer than 10 bytes")


_U64 = (1 << 64) - 1


def decode_batch(buf: Any) -> list[Record]:
    """Verify and decode one batch; offsets are absolute (baseOffset + delta)."""
    view = memoryview(buf)
    header = verify_batch(view)
    if header.length != len(view):
        raise CorruptDataError(f"batch is {header.length} bytes but buffer holds {len(view)}")
    return list(iter_records(view, header))


def batch_offsets(
    view: memoryview, header: BatchHeader
) -> list[tuple[int, int, bool, bytes | None]]:
    """(delta, timestamp, is_tombstone, key) per record of a VERIFIED batch, for indexing."""
    base = header.base_offset
    return [
        (rec.offset - base, rec.timestamp, rec.value is None, rec.key)
        for rec in iter_records(view, header)
    ]
