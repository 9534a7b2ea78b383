"""Kafka's record compression: the codec ids and names, and one codec provider, cramjam,
for all four Kafka codecs and their Kafka framings (gzip; snappy raw as librdkafka writes it
or in Java's xerial framing; the LZ4 frame format; zstd).

A batch's records section is compressed as one blob after its 61-byte header
(`fileformat.batch`). Decompression is bounded by MAX_DECOMPRESSED (or a smaller bound the
caller gives), and bytes that do not decompress raise DecompressionError.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from enum import IntEnum
from typing import Any

import cramjam
import numpy as np

from fileformat.errors import DecompressionError, UnsupportedError

MAX_DECOMPRESSED = 256 << 20
"""Largest records section a compressed batch may expand to (guards decompression bombs)."""


class Compression(IntEnum):
    """Kafka codec ids as stored in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


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
    out = output_buffer(0, limit)
    return bytes(out[: decompress_into(data, compression, out, limit)])


def output_buffer(room: int, limit: int | None = None) -> memoryview:
    """`room` bytes, then space for `limit` + 1 decompressed bytes. Uninitialised
    (np.empty of this size is an anonymous mapping): only pages written cost memory.
    `limit` None: MAX_DECOMPRESSED (read when called, so tests can lower it)."""
    limit = MAX_DECOMPRESSED if limit is None else limit
    return memoryview(np.empty(room + limit + 1, dtype=np.uint8).data)


def decompress_into(data: Any, compression: Compression, out: memoryview,
                     limit: int | None = None) -> int:
    """Decompress `data` into `out` (sized by `output_buffer` for `limit`), returning the
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
