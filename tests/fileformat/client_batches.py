"""Compressed record batches as Kafka clients send them, built by the clients' own code.

- aiokafka's `DefaultRecordBatchBuilder`: all four codecs (its snappy is Java's xerial
  framing, its lz4 an LZ4 frame with independent blocks, both through cramjam);
- kafka-python 3.x's `DefaultRecordBatchBuilder`: gzip and zstd (its snappy and lz4 need the
  python-snappy and lz4 packages, which siltstream does not depend on);
- raw snappy as librdkafka writes it (the snappy block format, no xerial framing): the
  records section of an aiokafka batch compressed with cramjam's `compress_raw`, the header
  re-framed here by hand, independently of `fileformat`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import cramjam
import crc32c
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from fileformat import Compression, Record

ClientRecord = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes]]]
"""(timestamp, key, value, headers) of one record a client appends."""

CODECS = (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
# Not an idempotent producer: the agent dedupes idempotent batches by sequence, and these
# codec batches all start at sequence 0 (idempotent batches: tests/idempotence/helpers.py).
PRODUCER_ID, PRODUCER_EPOCH = -1, -1


def aiokafka_batch(records: Sequence[ClientRecord], codec: Compression,
                   base_sequence: int = 0) -> bytes:
    """A batch as aiokafka's producer builds it."""
    builder = AioBuilder(magic=2, compression_type=int(codec), is_transactional=0,
                         producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH,
                         base_sequence=base_sequence, batch_size=1 << 30)
    for delta, (ts, key, value, headers) in enumerate(records):
        builder.append(delta, timestamp=ts, key=key, value=value, headers=list(headers))
    return bytes(builder.build())


def kafka_python_batch(records: Sequence[ClientRecord], codec: Compression,
                       base_sequence: int = 0) -> bytes:
    """A batch as kafka-python 3.x's producer builds it (gzip or zstd)."""
    if codec not in (Compression.NONE, Compression.GZIP, Compression.ZSTD):
        raise ValueError(f"kafka-python needs python-snappy/lz4 for {codec.name}")
    builder = KafkaPythonBuilder(magic=2, compression_type=int(codec), is_transactional=0,
                                 producer_id=PRODUCER_ID, producer_epoch=PRODUCER_EPOCH,
                                 base_sequence=base_sequence, batch_size=1 << 30)
    for delta, (ts, key, value, headers) in enumerate(records):
        builder.append(delta, ts, key, value, list(headers))
    return bytes(builder.build())


def raw_snappy_batch(records: Sequence[ClientRecord], codec: Compression = Compression.SNAPPY,
                     base_sequence: int = 0) -> bytes:
    """A batch whose records are raw snappy (no xerial framing), as librdkafka sends."""
    assert codec == Compression.SNAPPY
    plain = bytearray(aiokafka_batch(records, Compression.NONE, base_sequence))
    body = bytes(cramjam.snappy.compress_raw(bytes(plain[61:])))
    out = bytearray(plain[:61] + body)
    struct.pack_into(">i", out, 8, len(out) - 12)  # length
    (attrs,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, attrs | int(Compression.SNAPPY))
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


Builder = Callable[[Sequence[ClientRecord], Compression, int], bytes]

# (name, builder, codec) for every client batch kind the tests produce.
CLIENT_BATCHES: list[tuple[str, Builder, Compression]] = [
    *((f"aiokafka-{c.name.lower()}", aiokafka_batch, c) for c in CODECS),
    ("kafka-python-gzip", kafka_python_batch, Compression.GZIP),
    ("kafka-python-zstd", kafka_python_batch, Compression.ZSTD),
    ("librdkafka-raw-snappy", raw_snappy_batch, Compression.SNAPPY),
]


def sample_records(n: int, tag: bytes = b"", key_space: int | None = None) -> list[ClientRecord]:
    """`n` compressible records (keys k0..k{key_space-1} cycling, one header each)."""
    keys = key_space or n
    return [(1_700_000_000_000 + i, b"k%d" % (i % keys), tag + b"value-%d-" % i + b"x" * 200,
             [("h", b"%d" % i)]) for i in range(n)]


def expected(records: Sequence[ClientRecord], base: int = 0) -> list[Record]:
    """The records a consumer must see for `records` stored at offset `base`."""
    return [Record(base + i, ts, k, v, tuple(hs)) for i, (ts, k, v, hs) in enumerate(records)]
