"""Kafka RecordBatch v2 (magic 2): build, verify, decode, re-base.

Record sections are encoded by `BatchEncoder` (fileformat/_native.c; its pure-Python twin
`BatchEncoderReference`) and decoded by aiokafka's C-accelerated reader, always
UNCOMPRESSED; compression is done here around it with one codec provider, cramjam, for all
four Kafka codecs and their Kafka framings (gzip; snappy raw as librdkafka writes it or in
Java's xerial framing; the LZ4 frame format; zstd). Decompression is bounded by
MAX_DECOMPRESSED (or a smaller bound the caller gives), and bytes that do not decompress
raise DecompressionError.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import cramjam
import crc32c
import numpy as np
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch

from fileformat.errors import (
    ControlBatchError,
    CorruptDataError,
    DecompressionError,
    LogAppendTimeError,
    NullKeyRecordsError,
    OffsetDeltaError,
    OldMagicError,
    ProducerFieldsError,
    RecordCountError,
    RecordFramingError,
    TruncatedError,
    UnsupportedError,
)
from fileformat.native import _native

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
RECORD_COUNT_POS = struct.calcsize(">qiibIhiqqqhi")
LOG_OVERHEAD = LENGTH_POS + struct.calcsize(">i")  # bytes not counted by `length`: 12
FRAME_SIZE = CRC_POS  # bytes before the CRC (not covered by it): 17
MAGIC = 2
MIN_LENGTH = HEADER_SIZE - LOG_OVERHEAD

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

_BASE_OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
MAX_DECOMPRESSED = 256 << 20
"""Largest records section a compressed batch may expand to (guards decompression bombs)."""


class Compression(IntEnum):
    """Kafka codec ids as stored in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_CODECS = tuple(sorted(Compression))  # by codec id: _CODECS[id] is Compression(id)

# The codecs siltstream writes, by the Kafka producer's compression.type names (all five).
WRITABLE_COMPRESSIONS: Mapping[str, Compression] = {
    "none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
}
PRODUCER = "producer"
# Kafka's topic (and broker) compression.type values: the codec batches are rewritten in,
# None for `producer` (each batch keeps the codec its producer chose).
TOPIC_COMPRESSIONS: Mapping[str, Compression | None] = {
    PRODUCER: None, "uncompressed": Compression.NONE, "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD,
}


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with its absolute offset."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of a batch; `length` is the TOTAL batch size in bytes."""

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
        size = _LENGTH.unpack_from(view, pos + LENGTH_POS)[0]
        total = size + LOG_OVERHEAD
        if size <= 0 or pos + total > end:
            raise CorruptDataError(f"batch at {pos} declares {size} bytes, {end - pos} left")
        yield view[pos:pos + total]
        pos += total


def with_base_offset(batch: Any, base_offset: int) -> bytes:
    """Copy `batch` with baseOffset replaced (baseOffset is outside the CRC range)."""
    return b"".join((_BASE_OFFSET.pack(base_offset), memoryview(batch)[LENGTH_POS:]))


def rebase_in_place(buf: bytearray, shift: int, leader_epoch: int = -1) -> None:
    """Add `shift` to the baseOffset of every batch in `buf` (a concatenation of batches,
    split by their length prefixes only) and set their partitionLeaderEpoch: both outside
    the CRC range, so the batches stay valid. Per batch, never per record."""
    pos, end = 0, len(buf)
    while pos + LOG_OVERHEAD <= end:
        _BASE_OFFSET.pack_into(buf, pos, _BASE_OFFSET.unpack_from(buf, pos)[0] + shift)
        _LEADER_EPOCH.pack_into(buf, pos + LEADER_EPOCH_POS, leader_epoch)
        pos += _LENGTH.unpack_from(buf, pos + LENGTH_POS)[0] + LOG_OVERHEAD


# ---------------------------------------------------------------------------------------
# compression (one codec provider: cramjam)

# Kafka's default levels (KIP-390): gzip 6 (zlib's default), lz4 9, zstd 3.
GZIP_LEVEL = 6
LZ4_LEVEL = 9
ZSTD_LEVEL = 3
XERIAL_MAGIC = b"\x82SNAPPY\x00"
"""Java's snappy framing (xerial SnappyOutputStream): this magic, version and
compatible-version int32s (16 bytes), then blocks of [int32 length][raw snappy]."""
XERIAL_HEADER = struct.Struct(">8sii")
XERIAL_BLOCK = 32 * 1024  # uncompressed bytes per block, as Java's producer writes
_XERIAL_LENGTH = struct.Struct(">i")


def compress(data: Any, compression: Compression) -> bytes:
    """Compress a records section as Kafka's clients do for `compression`.

    snappy is written in Java's xerial framing (Java, librdkafka and the Python clients read
    it); lz4 as an LZ4 frame with independent blocks and no content checksum (KIP-57: what
    Kafka's Java reader accepts).
    """
    if compression == Compression.NONE:
        return bytes(data)
    if compression == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL))
    if compression == Compression.SNAPPY:
        view = memoryview(data)
        parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
        for at in range(0, len(view), XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[at : at + XERIAL_BLOCK]))
            parts += (_XERIAL_LENGTH.pack(len(block)), block)
        return b"".join(parts)
    if compression == Compression.LZ4:
        lz4 = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False,
                                     block_linked=False)
        lz4.compress(bytes(data))  # its streaming API takes bytes only
        return bytes(lz4.finish())
    if compression == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise UnsupportedError(f"cannot compress with {compression}")


def decompress(data: Any, compression: Compression, limit: int | None = None) -> bytes:
    """Decompress a records section (at most `limit` bytes: bomb guard).

    Raises DecompressionError if the bytes do not decompress, expand past the bound, or
    hold trailing bytes; never returns a partial result.
    """
    out = _output_buffer(0, limit)
    return bytes(out[: _decompress_into(data, compression, out, limit)])


def _output_buffer(room: int, limit: int | None = None) -> memoryview:
    """`room` bytes, then space for `limit` + 1 decompressed bytes. Uninitialised
    (np.empty of this size is an anonymous mapping): only pages written cost memory.
    `limit` None: MAX_DECOMPRESSED (read when called, so tests can lower it)."""
    limit = MAX_DECOMPRESSED if limit is None else limit
    return memoryview(np.empty(room + limit + 1, dtype=np.uint8).data)


def _decompress_into(data: Any, compression: Compression, out: memoryview,
                     limit: int | None = None) -> int:
    """Decompress `data` into `out` (sized by `_output_buffer` for `limit`), returning the
    byte count.

    cramjam fails instead of writing past the end of `out`, so a bomb is stopped at
    `limit` + 1 bytes written; reaching that size is itself an error.
    """
    limit = MAX_DECOMPRESSED if limit is None else limit
    try:
        if compression == Compression.SNAPPY:
            n = _snappy_into(memoryview(data), out, limit)
        elif compression == Compression.GZIP:
            n = cramjam.gzip.decompress_into(data, out)
        elif compression == Compression.LZ4:
            n = cramjam.lz4.decompress_into(data, out)
        elif compression == Compression.ZSTD:
            n = cramjam.zstd.decompress_into(data, out)
        else:
            raise UnsupportedError(f"cannot decompress {compression}")
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"{compression.name} records are corrupt or decompress to"
                                 f" more than {limit} bytes: {exc}") from exc
    if n > limit:
        raise DecompressionError(f"records decompress to more than {limit} bytes")
    return int(n)


def _snappy_into(data: memoryview, out: memoryview, limit: int) -> int:
    """Raw snappy (librdkafka) or Java's xerial framing (detected by its magic), into `out`.

    Each raw block states its decompressed length up front; it is checked against the
    space left before anything is decompressed.
    """
    if len(data) < XERIAL_HEADER.size or data[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        blocks: Iterator[memoryview] = iter((data,))
    else:
        blocks = _xerial_blocks(data)
    written = 0
    for block in blocks:
        size = cramjam.snappy.decompress_raw_len(block)
        if written + size > limit:
            raise DecompressionError(f"records decompress to more than {limit} bytes")
        got = cramjam.snappy.decompress_raw_into(block, out[written : written + size])
        if got != size:
            raise DecompressionError(f"snappy block holds {got} bytes, its header says {size}")
        written += size
    return written


def _xerial_blocks(data: memoryview) -> Iterator[memoryview]:
    """The raw snappy blocks of a xerial stream; a block running past the end is corrupt."""
    pos = XERIAL_HEADER.size
    end = len(data)
    while pos < end:
        if pos + _XERIAL_LENGTH.size > end:
            raise DecompressionError("xerial snappy block length runs past the records")
        (size,) = _XERIAL_LENGTH.unpack_from(data, pos)
        pos += _XERIAL_LENGTH.size
        if size < 0 or pos + size > end:
            raise DecompressionError(f"xerial snappy block of {size} bytes runs past the"
                                     " records")
        yield data[pos : pos + size]
        pos += size


# ---------------------------------------------------------------------------------------
# building


BatchEncoder = _native.BatchEncoder
"""Builds one uncompressed batch record by record (fileformat/_native.c): `append(delta,
timestamp, key, value, headers=())` returns the batch's size so far, `finish(base_offset)`
the batch with its CRC; `BatchEncoderReference` is its pure-Python twin."""


def _zigzag(out: bytearray, value: int) -> None:
    """Append Kafka's zigzag varint (varlong) of `value` to `out`."""
    z = (value << 1) ^ (value >> 63)
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _zigzag_blob(out: bytearray, blob: Any) -> None:
    """A length-prefixed bytes field (-1 for None)."""
    if blob is None:
        _zigzag(out, -1)
    else:
        blob = memoryview(blob).cast("B")
        _zigzag(out, len(blob))
        out += blob


class BatchEncoderReference:
    """The pure-Python twin of `BatchEncoder`: the same bytes on the same inputs (tests
    hold the C encoder to it). Header fields as aiokafka's producer writes them: leader
    epoch, producer id, epoch and base sequence -1, attributes 0 (uncompressed,
    CreateTime, not transactional)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._records = bytearray()
        self.record_count = 0
        self.last_offset_delta = -1
        self.min_timestamp = self.max_timestamp = self._first = -1

    @property
    def size(self) -> int:
        """Bytes the batch would have now (the header alone when empty)."""
        return HEADER_SIZE + len(self._records)

    def append(self, offset_delta: int, timestamp: int, key: Any, value: Any,
               headers: Sequence[tuple[str, Any]] = ()) -> int:
        """Add one record; returns the batch's size so far. Deltas must rise."""
        if not self.last_offset_delta < offset_delta <= 2**31 - 1:
            raise ValueError(f"offset deltas must increase within 0..2**31 - 1: {offset_delta}"
                             f" after {self.last_offset_delta}")
        if not -(2**63) <= timestamp < 2**63:
            raise OverflowError(f"timestamp {timestamp} does not fit in 64 bits")
        ts_delta = timestamp - self._first if self.record_count else 0
        if not -(2**63) <= ts_delta < 2**63:
            raise ValueError("timestamp delta does not fit in 64 bits")
        body = bytearray(b"\x00")  # attributes
        _zigzag(body, ts_delta)
        _zigzag(body, offset_delta)
        _zigzag_blob(body, key)
        _zigzag_blob(body, value)
        _zigzag(body, len(headers))
        for header in headers:
            if not (isinstance(header, tuple) and len(header) == 2
                    and isinstance(header[0], str)):
                raise TypeError("a record header must be a (str, bytes | None) tuple")
            name, hvalue = header
            _zigzag_blob(body, name.encode())
            _zigzag_blob(body, hvalue)
        _zigzag(self._records, len(body))
        self._records += body
        if not self.record_count:
            self._first = self.min_timestamp = self.max_timestamp = timestamp
        self.min_timestamp = min(self.min_timestamp, timestamp)
        self.max_timestamp = max(self.max_timestamp, timestamp)
        self.record_count += 1
        self.last_offset_delta = offset_delta
        return self.size

    def finish(self, base_offset: int = 0) -> bytes:
        """The batch with its CRC; the encoder is empty again."""
        if not self.record_count:
            raise ValueError("a batch needs at least one record")
        out = bytearray(HEADER_SIZE) + self._records
        HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, -1, MAGIC, 0, 0,
                         self.last_offset_delta, self._first, self.max_timestamp, -1, -1, -1,
                         self.record_count)
        _CRC.pack_into(out, CRC_POS, crc32c.crc32c(memoryview(out)[ATTRIBUTES_POS:]))
        self._reset()
        return bytes(out)


def seal_batch(built: Any, base_offset: int, compression: Compression) -> bytes:
    """Finish an uncompressed batch (`BatchEncoder.finish()`): set base, compress, re-CRC.

    Uncompressed, the base offset is patched into a copy (`BatchEncoder.finish(base)` sets
    it without one).
    """
    if compression == Compression.NONE:
        out = bytearray(built)
        _BASE_OFFSET.pack_into(out, BASE_OFFSET_POS, base_offset)
        return bytes(out)
    view = memoryview(built)
    body = compress(view[HEADER_SIZE:], compression)
    out = bytearray(HEADER_SIZE + len(body))
    out[:HEADER_SIZE] = view[:HEADER_SIZE]
    out[HEADER_SIZE:] = body
    _BASE_OFFSET.pack_into(out, BASE_OFFSET_POS, base_offset)
    _LENGTH.pack_into(out, LENGTH_POS, len(out) - LOG_OVERHEAD)
    (attrs,) = _ATTRIBUTES.unpack_from(out, ATTRIBUTES_POS)
    _ATTRIBUTES.pack_into(out, ATTRIBUTES_POS, (attrs & ~CODEC_MASK) | int(compression))
    _CRC.pack_into(out, CRC_POS, crc32c.crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return bytes(out)


def build_batch(
    records: Sequence[RecordTuple],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
) -> bytes:
    """Encode (offset_delta, timestamp, key, value, headers) tuples as one batch.

    Deltas must be strictly increasing but may have gaps (compaction keeps original offsets).
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    encoder = BatchEncoder()
    for delta, timestamp, key, value, headers in records:
        encoder.append(delta, timestamp, key, value, headers)
    if compression == Compression.NONE:
        return encoder.finish(base_offset)
    return seal_batch(encoder.finish(), base_offset, compression)


# ---------------------------------------------------------------------------------------
# decoding


def uncompressed_view(view: memoryview, header: BatchHeader,
                      limit: int | None = None) -> memoryview:
    """The batch itself if uncompressed, else a reassembled uncompressed copy (CRC unchanged:
    it covers the compressed bytes) whose records section is at most `limit` bytes. The
    records are decompressed straight after the copied header, so no further copy is made."""
    codec = header.compression
    if codec == Compression.NONE:
        return view
    buf = _output_buffer(HEADER_SIZE, limit)
    size = HEADER_SIZE + _decompress_into(view[HEADER_SIZE:], codec, buf[HEADER_SIZE:], limit)
    out = buf[:size]
    out[:HEADER_SIZE] = view[:HEADER_SIZE]
    _LENGTH.pack_into(out, LENGTH_POS, size - LOG_OVERHEAD)
    _ATTRIBUTES.pack_into(out, ATTRIBUTES_POS, header.attributes & ~CODEC_MASK)
    return out


def iter_records(view: memoryview, header: BatchHeader, offset_shift: int = 0) -> Iterator[Record]:
    """Decode a VERIFIED batch; record offset = baseOffset + delta + `offset_shift`."""
    plain = uncompressed_view(view, header)
    count = 0
    last = -1
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


def _varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
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

# What the records walk returns: (header of the input then the kept records' bytes, records
# kept, last kept offsetDelta, largest kept timestampDelta); the deltas are 0 if none kept.
FilteredRecords = tuple[bytearray, int, int, int]
RecordsWalk = Callable[[Any, int, Any], FilteredRecords]


def _filter_records_py(batch: Any, start: int, mask: Any) -> FilteredRecords:
    """Pure-Python twin of the C `_native.filter_records` (same contract, same errors):
    walk the length prefix of the len(mask) records from `start` to the end of `batch`,
    which they must frame exactly, and copy the records whose mask byte is non-zero."""
    buf = bytes(batch)
    keep = bytes(mask)
    end = len(buf)
    out = bytearray(buf[:start])
    pos = start
    kept = last_delta = max_ts = 0
    for i, flag in enumerate(keep):
        at = pos
        size, pos = _varint(buf, pos, end)
        if size < 0 or size > end - pos:
            raise CorruptDataError(f"record {i}: length is negative or runs past the batch")
        rec_end = pos + size
        if flag:
            if pos + 1 > rec_end:
                raise CorruptDataError(f"record {i}: no attributes byte")
            ts, q = _varint(buf, pos + 1, rec_end)
            last_delta = _varint(buf, q, rec_end)[0]
            max_ts = ts if kept == 0 else max(max_ts, ts)
            kept += 1
            out += buf[at:rec_end]
        pos = rec_end
    if pos != end:
        raise CorruptDataError(f"{len(keep)} records do not frame the records section")
    return out, kept, last_delta, max_ts


def _varint32(buf: Any, pos: int, end: int, what: str, i: int) -> tuple[int, int]:
    """Kafka's int32 zigzag varint (ByteUtils.readVarint) at `pos`: at most 5 bytes, the
    5th without its continuation bit, bits past 32 dropped; RecordFramingError saying
    `what` for record `i` if it runs to `end` or past 5 bytes."""
    raw = 0
    for shift in range(0, 35, 7):
        if pos >= end:
            break
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), pos
    raise RecordFramingError(f"record {i}: {what}")


_BLOB = "key or value length below -1 or past the record"
_HEADER = "header key or value length is invalid or past the record"


def _blob(buf: Any, pos: int, end: int, nullable: bool, what: str, i: int) -> tuple[int, int]:
    """A length (-1: null if `nullable`) and its bytes inside `end`: (length, position after)."""
    size, pos = _varint32(buf, pos, end, what, i)
    if size < (-1 if nullable else 0) or size > end - pos:
        raise RecordFramingError(f"record {i}: {what}")
    return size, pos + max(size, 0)


def _validate_records_py(batch: Any, start: int, count: int,
                         null_keys: bool) -> tuple[int, list[int] | None]:
    """Pure-Python twin of the C `_native.validate_records` (same contract, same errors and
    messages): walk a producer's `count` uncompressed records from `start` as Kafka's
    DefaultRecord.readFrom does, each framed exactly with offsetDelta = its index, the
    records filling the section; (largest timestampDelta, null-key indexes or None)."""
    buf = bytes(batch)
    end, pos = len(buf), start
    max_ts = 0
    nulls: list[int] | None = [] if null_keys else None
    for i in range(count):
        if pos >= end:
            raise RecordCountError(f"record {i}: missing: the records section ends before"
                                   " the batch's record count")
        size, pos = _varint32(buf, pos, end, _LENGTH_PREFIX, i)
        if size < 0 or size > end - pos:
            raise RecordFramingError(f"record {i}: {_LENGTH_PREFIX}")
        rec_end = pos + size
        try:
            if pos + 1 > rec_end:
                raise CorruptDataError("no attributes byte")
            ts, q = _varint(buf, pos + 1, rec_end)
        except CorruptDataError:
            raise RecordFramingError(f"record {i}: {_DELTAS}") from None
        delta, q = _varint32(buf, q, rec_end, _DELTAS, i)
        if delta != i:
            raise OffsetDeltaError(f"record {i}: offsetDelta is not the record's index")
        key_len, q = _blob(buf, q, rec_end, True, _BLOB, i)
        _, q = _blob(buf, q, rec_end, True, _BLOB, i)
        headers, q = _varint32(buf, q, rec_end, _HEADERS, i)
        if headers < 0 or headers > rec_end - q:
            raise RecordFramingError(f"record {i}: {_HEADERS}")
        for _ in range(headers):
            _, q = _blob(buf, q, rec_end, False, _HEADER, i)
            _, q = _blob(buf, q, rec_end, True, _HEADER, i)
        if q != rec_end:
            raise RecordFramingError(f"record {i}: fields do not fill the record's length"
                                     " exactly")
        max_ts = ts if i == 0 else max(max_ts, ts)
        if key_len < 0 and nulls is not None:
            nulls.append(i)
        pos = rec_end
    if pos != end:
        raise RecordCountError(f"record {count}: bytes remain after the batch's last record")
    return max_ts, nulls


_LENGTH_PREFIX = "length prefix is malformed, negative or runs past the batch"
_DELTAS = "timestamp or offset delta runs past the record"
_HEADERS = "header count is malformed, negative or past the record"
_VALIDATE_ERRORS: dict[int, type[CorruptDataError]] = {
    1: RecordFramingError, 2: OffsetDeltaError, 3: RecordCountError}
RecordsValidation = Callable[[Any, int, int, bool], tuple[int, "list[int] | None"]]


def _validate_records_native(batch: Any, start: int, count: int,
                             null_keys: bool) -> tuple[int, list[int] | None]:
    """`_native.validate_records`, its ValueError(kind, message) as the kind's class."""
    try:
        return _native.validate_records(batch, start, count, null_keys)
    except ValueError as exc:
        if len(exc.args) == 2 and exc.args[0] in _VALIDATE_ERRORS:
            raise _VALIDATE_ERRORS[exc.args[0]](exc.args[1]) from None
        raise


def _filter_records_native(batch: Any, start: int, mask: Any) -> FilteredRecords:
    """`_native.filter_records`, its ValueError (corrupt framing) as CorruptDataError."""
    try:
        return _native.filter_records(batch, start, mask)
    except ValueError as exc:
        raise CorruptDataError(str(exc)) from None


def _filter(view: memoryview, header: BatchHeader, keep: Any, compression: Compression,
            base_offset: int | None, walk: RecordsWalk) -> bytearray:
    mask = memoryview(keep)  # a bytes-like mask; TypeError for anything else
    if mask.nbytes != header.record_count:
        raise ValueError(f"keep mask of {mask.nbytes} bytes for a batch of "
                         f"{header.record_count} records")
    out, kept, last_delta, max_delta = walk(uncompressed_view(view, header), HEADER_SIZE, mask)
    if not kept:
        raise ValueError("a batch needs at least one record")
    if last_delta > header.last_offset_delta or last_delta < 0:
        raise CorruptDataError(f"batch at offset {header.base_offset}: record offset delta "
                               f"{last_delta} outside the batch")
    if compression != Compression.NONE:
        records = compress(memoryview(out)[HEADER_SIZE:], compression)
        del out[HEADER_SIZE:]
        out += records
    max_ts = (header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK
              else header.first_timestamp + max_delta)
    HEADER.pack_into(
        out, 0, header.base_offset if base_offset is None else base_offset,
        len(out) - LOG_OVERHEAD, header.leader_epoch, MAGIC, 0,
        (header.attributes & ~CODEC_MASK) | int(compression), last_delta,
        header.first_timestamp, max_ts, header.producer_id, header.producer_epoch,
        header.base_sequence, kept,
    )
    _CRC.pack_into(out, CRC_POS, crc32c.crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return out


def filter_batch(
    view: memoryview,
    header: BatchHeader,
    keep: Any,
    *,
    compression: Compression = Compression.NONE,
    base_offset: int | None = None,
) -> bytearray:
    """A copy of a VERIFIED batch holding only the records whose `keep` mask entry is set
    (bytes-like, one byte per record: bytes or a contiguous numpy bool array; at least one
    set).

    The kept records' bytes are copied as they are (no decode, no re-encode): the copy
    keeps the batch's baseOffset (or gets `base_offset`: where it is placed) and
    firstTimestamp, against which every record's offset and timestamp deltas are stored,
    so offsets and timestamps are unchanged (relative to the base). The header
    gets the new record count, the last kept record's offset delta, the kept records'
    largest timestamp (unless LogAppendTime), the codec `compression` and a new CRC;
    producer id, epoch, sequence and leader epoch are kept. The walk over every record's
    length prefix and the copy run in C (`_native.filter_records`).
    """
    return _filter(view, header, keep, compression, base_offset, _filter_records_native)


def filter_batch_reference(
    view: memoryview,
    header: BatchHeader,
    keep: Any,
    *,
    compression: Compression = Compression.NONE,
    base_offset: int | None = None,
) -> bytearray:
    """`filter_batch` with the records walk in pure Python: what tests hold the C to."""
    return _filter(view, header, keep, compression, base_offset, _filter_records_py)


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


# A client's batch that passed `check_client_batch`: its header, and its records'
# (delta, timestamp, is_tombstone, key) if it was decoded.
CheckedBatch = tuple[BatchHeader, list[tuple[int, int, bool, bytes | None]] | None]
_I64 = 1 << 63


def check_client_batch(raw: Any, decode: bool, *, null_keys: bool = False,
                       limit: int | None = None,
                       walk: RecordsValidation = _validate_records_native) -> CheckedBatch:
    """Every check a producer's batch gets before it is buffered, as Kafka's produce path
    makes them (ProduceRequest.validateRecords, UnifiedLog, LogValidator, DefaultRecordBatch
    and DefaultRecord; the Kafka exception each mirrors in brackets):

    - CorruptDataError [CorruptRecordException]: a magic other than 0-2, a length below
      the header's or not exactly `raw`, a bad CRC; DecompressionError (a CorruptDataError)
      for compressed records that do not decompress or exceed `limit` bytes.
    - UnsupportedError: codec ids 5-7.
    - InvalidBatchError subclasses [InvalidRecordException]: OldMagicError (0 or 1),
      ControlBatchError, RecordCountError (count < 1, lastOffsetDelta != count - 1, records
      missing or extra), ProducerFieldsError (producerId >= 0 with a negative baseSequence or
      epoch), RecordFramingError and OffsetDeltaError from the records walk
      (`_native.validate_records`, every record of the decompressed section: one C pass,
      nothing decoded into objects).
    - RecordErrorsError subclasses, per record (KIP-467): LogAppendTimeError
      [INVALID_TIMESTAMP] for a producer that set LogAppendTime, NullKeyRecordsError for
      null keys when `null_keys` (a compacted topic).

    The header returned carries the records' real largest timestamp (Kafka rewrites
    maxTimestamp; the index takes it, the bytes stay as sent), and the records
    (delta, timestamp, is_tombstone, key) when `decode`. A batch that passed cannot make
    `append_batch(raw, checked)` fail, so a caller checks all of its batches first and
    refuses a bad one before anything is buffered.
    """
    if len(raw) > MAGIC_POS and raw[MAGIC_POS] in (0, 1):
        raise OldMagicError(f"batch magic {raw[MAGIC_POS]}: Produce carries magic 2 only")
    view = memoryview(raw)
    try:
        header = verify_batch(view)
    except CorruptDataError:
        _negative_count(view)  # a good CRC over a negative count: Kafka's INVALID_RECORD
        raise
    if header.length != len(view):
        raise CorruptDataError(f"batch declares {header.length} bytes, got {len(view)}")
    if header.is_control:
        raise ControlBatchError("clients may not write control batches")
    count = header.record_count
    if count < 1 or header.last_offset_delta != count - 1:
        raise RecordCountError(f"recordCount {count} with lastOffsetDelta "
                               f"{header.last_offset_delta}: need count >= 1 and "
                               "lastOffsetDelta = count - 1")
    if header.producer_id >= 0 and (header.base_sequence < 0 or header.producer_epoch < 0):
        raise ProducerFieldsError(f"producerId {header.producer_id} with baseSequence "
                                  f"{header.base_sequence} and epoch {header.producer_epoch}")
    plain = uncompressed_view(view, header, limit)
    max_delta, nulls = walk(plain, HEADER_SIZE, count, null_keys)
    if header.attributes & TIMESTAMP_TYPE_MASK:
        raise LogAppendTimeError(
            "producers may not set the LogAppendTime timestamp type",
            tuple((i, "Producer should not set timestamp type to LogAppendTime.")
                  for i in range(count)))
    if nulls:
        raise NullKeyRecordsError(
            f"{len(nulls)} of {count} records have no key (a compacted topic)",
            tuple((i, "Compacted topic cannot accept message without key") for i in nulls))
    max_ts = (header.first_timestamp + max_delta + _I64) % (2 * _I64) - _I64  # Java's wrap
    if max_ts != header.max_timestamp:
        header = replace(header, max_timestamp=max_ts)
    decoded = None
    if decode:
        plain_header = replace(header, attributes=header.attributes & ~CODEC_MASK,
                               length=len(plain))
        decoded = batch_offsets(plain, plain_header)
    return header, decoded


def _negative_count(view: memoryview) -> None:
    """RecordCountError if `view` is a whole batch whose CRC holds and whose recordCount or
    lastOffsetDelta is negative (what `read_header` refuses as corrupt)."""
    if len(view) < HEADER_SIZE or _LENGTH.unpack_from(view, LENGTH_POS)[0] + LOG_OVERHEAD != len(
            view) or view[MAGIC_POS] != MAGIC:
        return
    fields = HEADER.unpack_from(view)
    if crc32c.crc32c(view[ATTRIBUTES_POS:]) == fields[4] and (fields[12] < 0 or fields[6] < 0):
        raise RecordCountError(f"recordCount {fields[12]} with lastOffsetDelta {fields[6]}")
