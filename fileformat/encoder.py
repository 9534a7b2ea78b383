"""Building RecordBatch v2: `BatchEncoder` (fileformat/_native.c) encodes records one by
one into an uncompressed batch, `BatchEncoderReference` is its pure-Python twin (tests hold
the C to it), `seal_batch` compresses a built batch and `build_batch` builds one from
record tuples.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fileformat.batch import (
    ATTRIBUTES_FIELD,
    ATTRIBUTES_POS,
    BASE_OFFSET_FIELD,
    BASE_OFFSET_POS,
    CODEC_MASK,
    HEADER,
    HEADER_SIZE,
    LENGTH_FIELD,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC,
    RecordTuple,
    seal_crc,
)
from fileformat.compression import Compression, compress
from fileformat.native import _native

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
        seal_crc(out)
        self._reset()
        return bytes(out)


def seal_batch(built: Any, base_offset: int, compression: Compression) -> bytes:
    """Finish an uncompressed batch (`BatchEncoder.finish()`): set base, compress, re-CRC.

    Uncompressed, the base offset is patched into a copy (`BatchEncoder.finish(base)` sets
    it without one).
    """
    if compression == Compression.NONE:
        out = bytearray(built)
        BASE_OFFSET_FIELD.pack_into(out, BASE_OFFSET_POS, base_offset)
        return bytes(out)
    view = memoryview(built)
    body = compress(view[HEADER_SIZE:], compression)
    out = bytearray(HEADER_SIZE + len(body))
    out[:HEADER_SIZE] = view[:HEADER_SIZE]
    out[HEADER_SIZE:] = body
    BASE_OFFSET_FIELD.pack_into(out, BASE_OFFSET_POS, base_offset)
    LENGTH_FIELD.pack_into(out, LENGTH_POS, len(out) - LOG_OVERHEAD)
    (attrs,) = ATTRIBUTES_FIELD.unpack_from(out, ATTRIBUTES_POS)
    ATTRIBUTES_FIELD.pack_into(out, ATTRIBUTES_POS, (attrs & ~CODEC_MASK) | int(compression))
    seal_crc(out)
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
