"""Kafka RecordBatch v2 codec: golden bytes, round trips, compatibility with aiokafka."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from fileformat import (
    Compression,
    CorruptDataError,
    Record,
    TruncatedError,
    build_batch,
    decode_batch,
    iter_batches,
    read_header,
    verify_batch,
    with_base_offset,
)
from fileformat.batch import HEADER_SIZE, RECORD_COUNT_POS, RecordTuple
from fileformat.encoder import seal_batch

# Two records (offset deltas 0 and 2: a gap), one with a header, one all-null, base 42.
GOLDEN_HEX = (
    "000000000000002a0000004bffffffff02ab3a712d0000000000020000018bcfe568000000018bcfe568"
    "05ffffffffffffffffffffffffffff0000000224000000066b65790a76616c756502026802310c000a04"
    "010100"
)
GOLDEN_CRC = 0xAB3A712D
GOLDEN_RECORDS: list[RecordTuple] = [
    (0, 1_700_000_000_000, b"key", b"value", [("h", b"1")]),
    (2, 1_700_000_000_005, None, None, []),
]

optional_bytes = st.none() | st.binary(max_size=64)
headers_st = st.lists(st.tuples(st.text(max_size=8), optional_bytes), max_size=3)
compressions = st.sampled_from(list(Compression))


@st.composite
def record_tuples(draw: st.DrawFn) -> list[RecordTuple]:
    """Records with strictly increasing (possibly gapped) deltas."""
    n = draw(st.integers(1, 20))
    gaps = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    ts0 = draw(st.integers(0, 2**41))
    out: list[RecordTuple] = []
    delta = draw(st.integers(0, 3)) - 1
    for gap in gaps:
        delta += gap
        ts = ts0 + draw(st.integers(-1000, 1000))
        out.append((delta, ts, draw(optional_bytes), draw(optional_bytes), draw(headers_st)))
    return out


def test_golden_batch_bytes_and_crc() -> None:
    batch = build_batch(GOLDEN_RECORDS, base_offset=42)
    assert batch.hex() == GOLDEN_HEX
    header = verify_batch(batch)
    assert header.crc == GOLDEN_CRC
    assert (header.base_offset, header.length, header.record_count) == (42, 87, 2)
    assert (header.last_offset_delta, header.first_timestamp, header.max_timestamp) == (
        2,
        1_700_000_000_000,
        1_700_000_000_005,
    )
    assert decode_batch(batch) == [
        Record(42, 1_700_000_000_000, b"key", b"value", (("h", b"1"),)),
        Record(44, 1_700_000_000_005, None, None, ()),
    ]


@settings(max_examples=150, deadline=None)
@given(records=record_tuples(), compression=compressions, base=st.integers(0, 2**40))
def test_round_trip(records: list[RecordTuple], compression: Compression, base: int) -> None:
    batch = build_batch(records, base_offset=base, compression=compression)
    header = verify_batch(batch)
    assert header.compression == compression
    assert header.length == len(batch)
    assert header.record_count == len(records)
    assert header.last_offset_delta == records[-1][0]
    got = decode_batch(batch)
    assert got == [
        Record(base + d, ts, k, v, tuple((hk, hv) for hk, hv in hs)) for d, ts, k, v, hs in records
    ]


@settings(max_examples=50, deadline=None)
@given(records=record_tuples(), compression=compressions)
def test_aiokafka_reads_what_we_build(records: list[RecordTuple], compression: Compression) -> None:
    """Our compressed batches are standard Kafka: aiokafka decodes them on its own."""
    batch = build_batch(records, base_offset=7, compression=compression)
    reader = DefaultRecordBatch(batch)
    assert reader.validate_crc()
    assert [(r.offset, r.key, r.value) for r in reader] == [
        (7 + d, k, v) for d, _, k, v, _ in records
    ]


@pytest.mark.parametrize("compression", list(Compression))
def test_we_read_what_aiokafka_builds(compression: Compression) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=0,
        producer_id=5,
        producer_epoch=1,
        base_sequence=9,
        batch_size=1 << 20,
    )
    for i in range(10):
        builder.append(i, timestamp=100 + i, key=b"k%d" % i, value=b"v" * i, headers=[])
    raw = bytes(builder.build())
    header = verify_batch(raw)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 9)
    assert [(r.offset, r.key) for r in decode_batch(raw)] == [(i, b"k%d" % i) for i in range(10)]


def test_with_base_offset_patches_only_the_base() -> None:
    batch = build_batch(GOLDEN_RECORDS, base_offset=42)
    moved = with_base_offset(batch, 1000)
    assert moved[8:] == batch[8:]
    assert verify_batch(moved).base_offset == 1000
    assert decode_batch(moved)[1].offset == 1002


def test_iter_batches_splits_a_concatenation() -> None:
    a = build_batch(GOLDEN_RECORDS, base_offset=0)
    b = build_batch([(0, 1, None, b"x", ())], base_offset=3, compression=Compression.ZSTD)
    parts = list(iter_batches(a + b))
    assert [(h.base_offset, bytes(v)) for h, v in parts] == [(0, a), (3, b)]
    with pytest.raises(TruncatedError):
        list(iter_batches(a + b[:-1]))


def test_corruption_and_framing_errors() -> None:
    batch = bytearray(build_batch(GOLDEN_RECORDS))
    for pos in range(17, len(batch)):  # everything from the CRC on is checksummed
        bad = bytearray(batch)
        bad[pos] ^= 0x01
        with pytest.raises(CorruptDataError):
            decode_batch(bytes(bad))
    bad = bytearray(batch)
    bad[16] = 1  # magic
    with pytest.raises(CorruptDataError, match="magic"):
        read_header(bytes(bad))
    with pytest.raises(TruncatedError):
        read_header(bytes(batch[: HEADER_SIZE - 1]))
    with pytest.raises(TruncatedError):
        verify_batch(bytes(batch[:-1]))


def test_record_count_mismatch_is_caught_even_with_a_valid_crc() -> None:
    """A builder bug (count field wrong but CRC recomputed) still never yields wrong data."""
    builder_out = bytearray(build_batch(GOLDEN_RECORDS))
    struct.pack_into(">i", builder_out, RECORD_COUNT_POS, 1)
    resealed = seal_batch(builder_out, 0, Compression.GZIP)  # recomputes the CRC
    with pytest.raises(CorruptDataError):
        decode_batch(resealed)


@pytest.mark.parametrize("claimed", [c for c in Compression if c != Compression.NONE])
def test_records_in_another_codec_are_corrupt(claimed: Compression) -> None:
    """Codec bits that do not match the body (CRC recomputed, so only decoding can tell)."""
    import crc32c

    actual = Compression.GZIP if claimed != Compression.GZIP else Compression.ZSTD
    batch = bytearray(build_batch(GOLDEN_RECORDS, compression=actual))
    struct.pack_into(">h", batch, 21, int(claimed))
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(CorruptDataError):
        decode_batch(bytes(batch))


def test_build_rejects_non_increasing_deltas() -> None:
    with pytest.raises(ValueError):
        build_batch([(1, 0, None, b"a", ()), (1, 0, None, b"b", ())])
    with pytest.raises(ValueError):
        build_batch([])
