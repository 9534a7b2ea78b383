"""The four Kafka codecs: client-built batches decode, our batches are what clients read,
Kafka's framings (xerial and raw snappy, LZ4 frames), bounded and checked decompression."""

from __future__ import annotations

import struct

import cramjam
import pytest
from aiokafka import codec as aiokafka_codec
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

from fileformat import (
    Compression,
    CorruptDataError,
    build_batch,
    decode_batch,
    verify_batch,
)
from fileformat import compression as compression_module
from fileformat.batch import HEADER_SIZE
from fileformat.compression import XERIAL_BLOCK, XERIAL_MAGIC, compress, decompress
from tests.fileformat.client_batches import (
    CLIENT_BATCHES,
    CODECS,
    PRODUCER_EPOCH,
    PRODUCER_ID,
    Builder,
    expected,
    sample_records,
)


@pytest.mark.parametrize(("name", "build", "codec"), CLIENT_BATCHES,
                         ids=[c[0] for c in CLIENT_BATCHES])
def test_client_batches_decode(name: str, build: Builder, codec: Compression) -> None:
    records = sample_records(300)  # > 32 KiB of records: several xerial blocks
    raw = build(records, codec, 5)
    header = verify_batch(raw)
    assert header.compression == codec and header.length == len(raw)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        PRODUCER_ID, PRODUCER_EPOCH, 5)
    assert len(raw) < 300 * 200 // 4  # really compressed
    assert decode_batch(raw) == expected(records)


def test_snappy_framings() -> None:
    """xerial (Java's, what we write) and raw (librdkafka's) both decode; blocks are
    Java's 32 KiB."""
    data = bytes(range(256)) * 1000  # 256,000 bytes: 8 xerial blocks
    ours = compress(data, Compression.SNAPPY)
    assert ours.startswith(XERIAL_MAGIC)
    assert struct.unpack_from(">ii", ours, 8) == (1, 1)  # version, compatible version
    blocks, pos = 0, 16
    while pos < len(ours):
        (size,) = struct.unpack_from(">i", ours, pos)
        assert len(cramjam.snappy.decompress_raw(ours[pos + 4 : pos + 4 + size])) <= XERIAL_BLOCK
        pos += 4 + size
        blocks += 1
    assert pos == len(ours) and blocks == -(-len(data) // XERIAL_BLOCK)
    assert decompress(ours, Compression.SNAPPY) == data
    assert aiokafka_codec.snappy_decode(ours) == data  # a client's decoder reads it
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(raw, Compression.SNAPPY) == data


def test_lz4_is_a_kafka_lz4_frame() -> None:
    """KIP-57: an LZ4 frame (magic 0x184D2204) with independent blocks, no content checksum,
    which Kafka's Java reader requires; a client's decoder reads it."""
    data = b"abc" * 100_000
    ours = compress(data, Compression.LZ4)
    assert ours[:4] == b"\x04\x22\x4d\x18"
    flg = ours[4]
    assert flg >> 6 == 1 and flg & 0x20 and not flg & 0x04  # version 01, B.Indep, no C.Checksum
    assert aiokafka_codec.lz4_decode(ours) == data
    assert decompress(ours, Compression.LZ4) == data


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD])
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    records = [(i, 1000 + i, b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(50)]
    raw = build_batch(records, base_offset=10, compression=codec)
    batch = KafkaPythonBatch(raw)
    assert batch.validate_crc() and batch.compression_type == int(codec)
    assert [(r.offset, r.key, r.value) for r in batch] == [
        (10 + i, b"k%d" % i, b"v" * i) for i in range(50)]


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=100_000) | st.binary(max_size=50).map(lambda b: b * 2000),
       codec=st.sampled_from(CODECS))
def test_compress_decompress_round_trip(data: bytes, codec: Compression) -> None:
    assert decompress(compress(data, codec), codec) == data
    assert decompress(memoryview(b"xx" + compress(data, codec))[2:], codec) == data


@pytest.mark.parametrize("codec", CODECS)
def test_damaged_records_never_decode(codec: Compression) -> None:
    """Truncated, extended or garbage records sections raise CorruptDataError."""
    data = b"".join(b"record %d " % i for i in range(5000))
    good = compress(data, codec)
    bad = [good[: len(good) // 2], good[:-3], b"", b"\x00" * 40, good[:10] + b"\xff" * 60]
    if codec != Compression.SNAPPY:  # a raw snappy block has no end mark to check
        bad.append(good + b"garbage")
    for body in bad:
        with pytest.raises(CorruptDataError):
            decompress(body, codec)


def test_xerial_block_running_past_the_end_is_corrupt() -> None:
    good = compress(b"z" * 100_000, Compression.SNAPPY)
    (size,) = struct.unpack_from(">i", good, 16)
    for bad in (good[:18], good[: 16 + 4 + size - 1],
                good[:16] + struct.pack(">i", -1) + good[20:],
                good[:16] + struct.pack(">i", len(good)) + good[20:]):
        with pytest.raises(CorruptDataError):
            decompress(bad, Compression.SNAPPY)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [4096, 4097, 100_000])
def test_decompression_bomb_is_stopped(monkeypatch: pytest.MonkeyPatch, codec: Compression,
                                       size: int) -> None:
    """Exactly the bound decompresses; one byte more is refused, however it is framed."""
    monkeypatch.setattr(compression_module, "MAX_DECOMPRESSED", 4096)
    body = compress(b"\x00" * size, codec)
    if size <= 4096:
        assert decompress(body, codec) == b"\x00" * size
    else:
        with pytest.raises(CorruptDataError, match="more than 4096 bytes"):
            decompress(body, codec)
    raw_snappy = bytes(cramjam.snappy.compress_raw(b"\x00" * size))
    if size > 4096:
        with pytest.raises(CorruptDataError, match="more than 4096 bytes"):
            decompress(raw_snappy, Compression.SNAPPY)


@pytest.mark.parametrize("codec", CODECS)
def test_decoded_batch_reports_its_codec_and_keeps_its_header(codec: Compression) -> None:
    records = [(i, 5, b"k", b"v%d" % i, ()) for i in range(3)]
    raw = build_batch(records, base_offset=3, compression=codec)
    plain = build_batch(records, base_offset=3)
    assert raw[HEADER_SIZE:] != plain[HEADER_SIZE:]
    assert decode_batch(raw) == decode_batch(plain)


@pytest.mark.parametrize("compression", [c for c in Compression if c != Compression.NONE])
def test_decompression_is_bounded(
    monkeypatch: pytest.MonkeyPatch, compression: Compression
) -> None:
    packed = build_batch([(0, 0, None, b"x" * 5000, ())], compression=compression)
    assert decode_batch(packed)[0].value == b"x" * 5000
    monkeypatch.setattr(compression_module, "MAX_DECOMPRESSED", 1000)
    with pytest.raises(CorruptDataError, match="more than"):
        decode_batch(packed)
