"""The C records walk (`_native.filter_records`, behind `filter_batch`) against its
pure-Python twin on the same inputs: valid batches of every codec, control batches, empty
results, and arbitrary (mostly corrupt) bytes, where both must fail alike; and what
`filter_batch` keeps."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fileformat import (
    Compression,
    CorruptDataError,
    build_batch,
    decode_batch,
    read_header,
    verify_batch,
)
from fileformat.batch import (
    ATTRIBUTES_POS,
    CONTROL_MASK,
    CRC_POS,
    HEADER_SIZE,
    RECORD_COUNT_POS,
    TRANSACTIONAL_MASK,
    RecordTuple,
)
from fileformat.filter import (
    _filter_records_native,
    _filter_records_py,
    filter_batch,
    filter_batch_reference,
)
from fileformat.native import _native
from tests.fileformat.test_fileformat_batch import GOLDEN_RECORDS, compressions, record_tuples

Outcome = tuple[bytearray, int, int, int] | type[CorruptDataError]


def _walk_both(batch: bytes, start: int, mask: bytes) -> tuple[Outcome, Outcome]:
    """Each walk's result, or CorruptDataError's class when it refused the bytes."""
    outcomes: list[Outcome] = []
    for walk in (_filter_records_native, _filter_records_py):
        try:
            outcomes.append(walk(batch, start, mask))
        except CorruptDataError:
            outcomes.append(CorruptDataError)
    return outcomes[0], outcomes[1]


def _varint(value: int) -> bytes:
    """Kafka's zigzag varint of a signed 64-bit value."""
    raw = ((value << 1) ^ (value >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


@settings(max_examples=400, deadline=None)
@given(record_tuples(), compressions, compressions, st.data())
def test_filter_batch_matches_the_reference(
        records: list[RecordTuple], codec_in: Compression, codec_out: Compression,
        data: st.DataObject) -> None:
    batch = build_batch(records, base_offset=7, compression=codec_in)
    header = verify_batch(batch)
    mask = bytes(data.draw(st.lists(st.booleans(), min_size=len(records),
                                    max_size=len(records))))
    if not any(mask):
        for fn in (filter_batch, filter_batch_reference):
            with pytest.raises(ValueError, match="at least one record"):
                fn(memoryview(batch), header, mask, compression=codec_out)
        return
    got = filter_batch(memoryview(batch), header, mask, compression=codec_out)
    assert got == filter_batch_reference(memoryview(batch), header, mask, compression=codec_out)
    assert decode_batch(got) == [r for r, k in zip(decode_batch(batch), mask, strict=True) if k]


def test_a_numpy_mask_is_accepted() -> None:
    np = pytest.importorskip("numpy")
    records: list[RecordTuple] = [(d, 1000 + d, b"k%d" % d, b"v" * d, ()) for d in range(6)]
    batch = build_batch(records)
    header = verify_batch(batch)
    mask = np.array([True, False, False, True, True, False])
    out = filter_batch(memoryview(batch), header, mask[:6])
    assert [r.offset for r in decode_batch(out)] == [0, 3, 4]
    assert out == filter_batch_reference(memoryview(batch), header, mask)
    for fn in (filter_batch, filter_batch_reference):  # one byte per record, nothing else
        with pytest.raises(ValueError, match="mask of 48 bytes"):
            fn(memoryview(batch), header, mask.astype(np.int64))
        with pytest.raises(TypeError):
            fn(memoryview(batch), header, [True] * 6)


def test_control_batches_filter_alike() -> None:
    # A transaction marker: key (version, type=COMMIT), value (version, coordinator epoch).
    marker = (0, 5, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3), ())
    plain = bytearray(build_batch([marker, (1, 6, *marker[2:])], base_offset=50))
    (attrs,) = struct.unpack_from(">h", plain, ATTRIBUTES_POS)
    struct.pack_into(">h", plain, ATTRIBUTES_POS, attrs | CONTROL_MASK | TRANSACTIONAL_MASK)
    struct.pack_into(">I", plain, CRC_POS, crc32c.crc32c(bytes(plain[ATTRIBUTES_POS:])))
    header = verify_batch(bytes(plain))
    assert header.is_control
    out = filter_batch(memoryview(plain), header, b"\x00\x01")
    assert out == filter_batch_reference(memoryview(plain), header, b"\x00\x01")
    new = verify_batch(out)
    assert new.is_control and new.record_count == 1 and new.last_offset_delta == 1
    assert new.max_timestamp == 6


def test_an_empty_result_is_the_header_alone() -> None:
    records: list[RecordTuple] = [(0, 1, b"a", b"x", ()), (1, 2, b"b", None, ())]
    batch = build_batch(records)
    native, reference = _walk_both(batch, HEADER_SIZE, b"\x00\x00")
    assert native == reference == (bytearray(batch[:HEADER_SIZE]), 0, 0, 0)
    # With no records expected, a non-empty section does not frame.
    assert _walk_both(batch, HEADER_SIZE, b"") == (CorruptDataError, CorruptDataError)
    assert _walk_both(batch[:HEADER_SIZE], HEADER_SIZE, b"") == (
        (bytearray(batch[:HEADER_SIZE]), 0, 0, 0),) * 2


def test_long_varints_and_extreme_deltas() -> None:
    # 10-byte varlongs at both ends of int64 are read; an 11-byte one is corrupt.
    body = b"\x00" + _varint(-(2**63)) + _varint(2**63 - 1) + b"\x01\x01\x00"
    record = _varint(len(body)) + body
    assert len(_varint(2**63 - 1)) == 10
    native, reference = _walk_both(b"HDR" + record, 3, b"\x01")
    assert native == reference == (bytearray(b"HDR" + record), 1, 2**63 - 1, -(2**63))
    eleven = b"\x00" + b"\x80" * 10 + b"\x00" + b"\x00"
    assert _walk_both(_varint(len(eleven)) + eleven, 0, b"\x01") == (CorruptDataError,) * 2
    negative = _varint(-1)
    assert _walk_both(negative, 0, b"\x00") == (CorruptDataError,) * 2
    assert _walk_both(b"\x00", 0, b"\x01") == (CorruptDataError,) * 2  # no attributes byte
    assert _walk_both(b"\x00", 0, b"\x00") == ((bytearray(), 0, 0, 0),) * 2  # skipped, fine


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=12))
def test_arbitrary_bytes_walk_alike(section: bytes, mask: bytes) -> None:
    native, reference = _walk_both(b"H" + section, 1, mask)
    assert native == reference


@settings(max_examples=300, deadline=None)
@given(record_tuples(), st.data())
def test_damaged_batches_walk_alike(records: list[RecordTuple], data: st.DataObject) -> None:
    batch = bytearray(build_batch(records))
    at = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
    batch[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(HEADER_SIZE, len(batch)))
    mask = bytes(data.draw(st.lists(st.booleans(), min_size=len(records),
                                    max_size=len(records))))
    native, reference = _walk_both(bytes(batch[:cut]), HEADER_SIZE, mask)
    assert native == reference


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        _native.filter_records(b"abc", 4, b"")
    with pytest.raises(TypeError):
        _native.filter_records("text", 0, b"")


def test_a_new_base_offset_moves_the_records_with_it() -> None:
    records: list[RecordTuple] = [(d, 1000 + d, b"k%d" % d, b"v", ()) for d in range(4)]
    batch = build_batch(records, base_offset=10)
    header = verify_batch(batch)
    out = filter_batch(memoryview(batch), header, b"\x00\x01\x00\x01", base_offset=500)
    assert out == filter_batch_reference(memoryview(batch), header, b"\x00\x01\x00\x01",
                                         base_offset=500)
    assert [(r.offset, r.timestamp) for r in decode_batch(out)] == [(501, 1001), (503, 1003)]


@settings(max_examples=300, deadline=None)
@given(record_tuples(), compressions, compressions, st.data())
def test_filter_batch_keeps_exactly_the_chosen_records(
        records: list[RecordTuple], codec_in: Compression, codec_out: Compression,
        data: st.DataObject) -> None:
    from fileformat.filter import filter_batch

    batch = build_batch(records, base_offset=1000, compression=codec_in)
    header = verify_batch(batch)
    keep = sorted(data.draw(st.sets(st.integers(0, len(records) - 1), min_size=1)))
    mask = bytes(j in keep for j in range(len(records)))
    out = filter_batch(memoryview(batch), header, mask, compression=codec_out)
    new = verify_batch(out)
    assert new.length == len(out) and new.compression == codec_out
    got = decode_batch(out)
    want = [decode_batch(batch)[j] for j in keep]
    assert got == want  # same offsets, timestamps, keys, values, headers
    assert new.record_count == len(keep) and new.base_offset == 1000
    assert new.base_offset + new.last_offset_delta == want[-1].offset
    assert new.max_timestamp == max(r.timestamp for r in want)
    assert new.first_timestamp == header.first_timestamp


def test_filter_batch_rejects_bad_indices_and_framing() -> None:
    from fileformat.filter import filter_batch

    batch = build_batch(GOLDEN_RECORDS, base_offset=42)
    header = verify_batch(batch)
    for keep in (b"", b"\x00\x00", b"\x01", b"\x01\x01\x01"):  # none kept, wrong length
        with pytest.raises(ValueError):
            filter_batch(memoryview(batch), header, keep)
    # A record count that disagrees with the records' framing is corrupt, never misread.
    lying = bytearray(batch)
    struct.pack_into(">i", lying, RECORD_COUNT_POS, 3)
    with pytest.raises(CorruptDataError):
        filter_batch(memoryview(bytes(lying)), read_header(bytes(lying)), b"\x01\x00\x00")
    struct.pack_into(">i", lying, RECORD_COUNT_POS, 1)
    with pytest.raises(CorruptDataError):
        filter_batch(memoryview(bytes(lying)), read_header(bytes(lying)), b"\x01")
