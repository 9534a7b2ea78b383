"""The produce path's C encoder (`_native.BatchEncoder`, `_native.crc32c`) against its twins:
`BatchEncoderReference` (pure Python), aiokafka's builder and the crc32c package, on the
same inputs."""

from __future__ import annotations

from typing import Any

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from fileformat import decode_batch
from fileformat.encoder import BatchEncoder, BatchEncoderReference
from fileformat.native import _native

Header = tuple[str, Any]
Rec = tuple[int, int, Any, Any, list[Header]]

blobs = st.none() | st.binary(max_size=40) | st.binary(min_size=100, max_size=20_000)
# The encoder takes any bytes-like key or value, as aiokafka's builder does.
blob_types = st.sampled_from([bytes, bytearray, memoryview])
headers_st = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=300)),
                      max_size=3)


@st.composite
def records(draw: st.DrawFn) -> list[Rec]:
    """Records with rising (possibly gapped) offset deltas and timestamps on either side of
    the first one, far apart too (multi-byte and negative varints)."""
    out: list[Rec] = []
    delta = draw(st.integers(-1, 3))
    ts0 = draw(st.integers(-(2**40), 2**62))
    for _ in range(draw(st.integers(1, 12))):
        delta += draw(st.integers(1, 100_000))
        ts = ts0 + draw(st.integers(-(2**40), 2**40))
        key, value = draw(blobs), draw(blobs)
        as_type = draw(blob_types)
        out.append((delta, ts, None if key is None else as_type(key),
                    None if value is None else as_type(value), draw(headers_st)))
    return out


def encode(encoder: Any, recs: list[Rec], base: int) -> tuple[list[int], bytes]:
    sizes = [encoder.append(d, ts, k, v, h) for d, ts, k, v, h in recs]
    return sizes, encoder.finish(base)


def aiokafka_batch(recs: list[Rec], base: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=2**31 - 1)
    for d, ts, k, v, h in recs:
        builder.append(d, timestamp=ts, key=k, value=v, headers=h)
    out = builder.build()
    out[:8] = base.to_bytes(8, "big", signed=True)
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(recs=records(), base=st.integers(0, 2**62))
def test_native_encoder_matches_the_reference_and_aiokafka(recs: list[Rec], base: int) -> None:
    native, reference = BatchEncoder(), BatchEncoderReference()
    sizes, batch = encode(native, recs, base)
    ref_sizes, ref_batch = encode(reference, recs, base)
    assert batch == ref_batch
    assert sizes == ref_sizes
    assert sizes[-1] == len(batch)
    assert batch == aiokafka_batch(recs, base)
    decoded = decode_batch(batch)
    assert [(r.offset - base, r.timestamp, r.key, r.value, list(r.headers)) for r in decoded] == [
        (d, ts, None if k is None else bytes(k), None if v is None else bytes(v), h)
        for d, ts, k, v, h in recs]


@settings(max_examples=100, deadline=None)
@given(recs=records())
def test_encoder_state_is_the_same_in_both(recs: list[Rec]) -> None:
    native, reference = BatchEncoder(), BatchEncoderReference()
    for encoder in (native, reference):
        assert (encoder.record_count, encoder.size, encoder.min_timestamp,
                encoder.max_timestamp, encoder.last_offset_delta) == (0, 61, -1, -1, -1)
    for d, ts, k, v, h in recs:
        native.append(d, ts, k, v, h)
        reference.append(d, ts, k, v, h)
        assert (native.record_count, native.size, native.min_timestamp, native.max_timestamp,
                native.last_offset_delta) == (
                    reference.record_count, reference.size, reference.min_timestamp,
                    reference.max_timestamp, reference.last_offset_delta)
    stamps = [ts for _, ts, _, _, _ in recs]
    assert (native.min_timestamp, native.max_timestamp) == (min(stamps), max(stamps))


BAD_APPENDS: list[tuple[tuple[Any, ...], type[Exception]]] = [
    ((0, 5, b"k", b"v"), ValueError),  # delta not above the last one (0)
    ((2**31, 5, b"k", b"v"), ValueError),  # delta past int32
    ((3, 5, "key", b"v"), TypeError),  # str key
    ((3, 5, b"k", 7), TypeError),  # int value
    ((3, 5, b"k", b"v", [("h", "text")]), TypeError),  # str header value
    ((3, 5, b"k", b"v", [(b"h", b"x")]), TypeError),  # bytes header name
    ((3, 5, b"k", b"v", [("h", b"x", b"y")]), TypeError),  # not a pair
    ((3, 5, b"k", b"v", 5), TypeError),  # headers not a sequence
    ((3, 2**63 - 1, b"k", b"v"), ValueError),  # timestamp delta overflows (first is -2)
    ((3, 2**63, b"k", b"v"), OverflowError),  # timestamp past int64
]


@pytest.mark.parametrize(("args", "error"), BAD_APPENDS)
@pytest.mark.parametrize("make", [BatchEncoder, BatchEncoderReference])
def test_a_refused_append_leaves_the_encoder_unchanged(
        make: Any, args: tuple[Any, ...], error: type[Exception]) -> None:
    encoder = make()
    encoder.append(0, -2, b"k", b"v", [("a", None)])
    size = encoder.size
    with pytest.raises(error):
        encoder.append(*args)
    assert (encoder.record_count, encoder.size) == (1, size)
    encoder.append(1, 9, None, b"w")
    clean = make()
    clean.append(0, -2, b"k", b"v", [("a", None)])
    clean.append(1, 9, None, b"w")
    assert encoder.finish(7) == clean.finish(7)


@pytest.mark.parametrize("make", [BatchEncoder, BatchEncoderReference])
def test_finish_needs_a_record_and_empties_the_encoder(make: Any) -> None:
    encoder = make()
    with pytest.raises(ValueError, match="at least one record"):
        encoder.finish()
    encoder.append(0, 1, b"a", b"b")
    first = encoder.finish(3)
    assert (encoder.record_count, encoder.size, encoder.last_offset_delta) == (0, 61, -1)
    encoder.append(0, 1, b"a", b"b")  # deltas start over
    assert encoder.finish(3) == first


def test_a_batch_of_many_large_records_grows_and_round_trips() -> None:
    """Past the initial capacity many times over (the buffer doubles in place)."""
    value = bytes(range(256)) * 64  # 16 KiB
    encoder, reference = BatchEncoder(), BatchEncoderReference()
    for i in range(200):
        encoder.append(i, 1_700_000_000_000 + i, b"key-%d" % i, value)
        reference.append(i, 1_700_000_000_000 + i, b"key-%d" % i, value)
    batch = encoder.finish(0)
    assert batch == reference.finish(0)
    assert len(decode_batch(batch)) == 200


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=5000), start=st.integers(0, 2**32 - 1))
def test_crc32c_matches_the_crc32c_package(data: bytes, start: int) -> None:
    expected = crc32c.crc32c(data, start)
    assert _native.crc32c(data, start) == expected
    assert _native.crc32c_portable(data, start) == expected  # the fallback without SSE4.2
    assert _native.crc32c(memoryview(data)) == crc32c.crc32c(data)


def test_crc32c_refuses_a_crc_past_32_bits() -> None:
    with pytest.raises(ValueError):
        _native.crc32c(b"x", 2**32)
