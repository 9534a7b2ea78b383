"""Per-tombstone first-cleaned times: round trips, every byte covered, builder contracts."""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fileformat import (
    FOOTER_SIZE,
    Chunk,
    ChunkBuilder,
    ChunkIndex,
    CorruptDataError,
    DataReader,
    FileWriter,
    KeyHasher,
    TruncatedError,
    build_batch,
    encode_file,
    iter_chunk_records,
    iter_meta,
    parse_footer,
    read_object,
)
from fileformat.metareader import _decode_tombstones
from fileformat.objectfile import OBJECT_HEADER_SIZE, TOMB_HEAD

HASHER = KeyHasher(b"cluster-secret")
MAX_MS = 2**63 - 1

time_st = st.one_of(
    st.just(0),
    st.integers(1_600_000_000_000, 1_900_000_000_000),
    st.integers(1, MAX_MS),
)
value_st = st.none() | st.binary(max_size=12)


@dataclass
class Compacted:
    """One append_compacted call: a batch at next_offset + gap with records at base + deltas."""

    gap: int
    deltas: list[int]
    values: list[bytes | None]
    times: list[int]  # per record; only tombstones' entries are meaningful
    as_array: str  # how tombstone_cleaned_at is passed: "none", "list", "int64", "uint64"


@st.composite
def compacted_op(draw: st.DrawFn, keyed: bool) -> Compacted:
    deltas = sorted(draw(st.sets(st.integers(0, 12), min_size=1, max_size=6)))
    values = [draw(value_st) if keyed else draw(st.binary(max_size=12)) for _ in deltas]
    times = [draw(time_st) for _ in deltas]
    as_array = draw(st.sampled_from(["none", "list", "int64", "uint64"]))
    return Compacted(draw(st.integers(0, 5)), deltas, values, times, as_array)


@dataclass
class Spec:
    topic: str
    partition: int
    keyed: bool
    ops: list[Any]  # (ts, key, value) for append, list of them for append_batch, Compacted


@st.composite
def specs(draw: st.DrawFn, max_chunks: int = 4, max_ops: int = 6) -> list[Spec]:
    keys = sorted(
        draw(
            st.lists(
                st.tuples(st.sampled_from(["a", "orders"]), st.integers(0, 3)),
                unique=True,
                min_size=1,
                max_size=max_chunks,
            )
        )
    )
    out = []
    for topic, partition in keys:
        keyed = draw(st.booleans())
        record = st.tuples(st.integers(0, 2**40), st.binary(min_size=1, max_size=6), value_st)
        op = st.one_of(record, st.lists(record, min_size=1, max_size=3), compacted_op(keyed))
        out.append(Spec(topic, partition, keyed, draw(st.lists(op, max_size=max_ops))))
    return out


def fill(builder: ChunkBuilder, spec: Spec) -> tuple[list[int], list[int]]:
    """Apply spec's ops; returns the expected (tombstone offsets, cleaned-at ms)."""
    tombs: list[int] = []
    times: list[int] = []
    for op in spec.ops:
        if isinstance(op, Compacted):
            base = builder.next_offset + op.gap
            raw = build_batch(
                [
                    (d, 1000 + d, b"k%d" % d, v, ())
                    for d, v in zip(op.deltas, op.values, strict=True)
                ]
            )
            offs = [base + d for d in op.deltas]
            sel = [i for i, v in enumerate(op.values) if v is None]
            t_offs = [offs[i] for i in sel]
            t_times = [op.times[i] for i in sel]
            given_times: Any = {
                "none": None,
                "list": t_times,
                "int64": np.array(t_times, dtype=np.int64),
                "uint64": np.array(t_times, dtype=np.uint64),
            }[op.as_array]
            builder.append_compacted(
                raw,
                base=base,
                offsets=np.array(offs),
                tombstones=t_offs,
                key_hashes=HASHER.hash_many(b"k%d" % d for d in op.deltas) if spec.keyed else b"",
                tombstone_cleaned_at=given_times,
            )
            tombs += t_offs
            times += [0] * len(t_times) if given_times is None else t_times
        elif isinstance(op, tuple):
            rel = builder.append(*op)
            if spec.keyed and op[2] is None:
                tombs.append(rel)
                times.append(0)
        else:
            raw = build_batch([(i, ts, k, v, ()) for i, (ts, k, v) in enumerate(op)])
            first, _ = builder.append_batch(raw)
            if spec.keyed:
                new = [first + i for i, r in enumerate(op) if r[2] is None]
                tombs += new
                times += [0] * len(new)
    return tombs, times


def new_builder(spec: Spec, writer: FileWriter | None = None) -> ChunkBuilder:
    args: dict[str, Any] = {"hasher": HASHER if spec.keyed else None, "max_batch_bytes": 80}
    if writer is not None:
        return writer.open_chunk(spec.topic, spec.partition, **args)
    return ChunkBuilder(spec.topic, spec.partition, **args)


def build(spec_list: list[Spec]) -> tuple[list[Chunk], list[tuple[list[int], list[int]]]]:
    chunks, expected = [], []
    for spec in spec_list:
        builder = new_builder(spec)
        expected.append(fill(builder, spec))
        chunks.append(builder.finish())
    return chunks, expected


def check_index(ci: ChunkIndex, tombs: list[int], times: list[int]) -> None:
    assert list(ci.tombstones) == tombs
    assert ci.tombstone_cleaned_at.dtype == np.int64
    assert not ci.tombstone_cleaned_at.flags.writeable
    assert ci.tombstone_cleaned_at.tolist() == times


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_list=specs())
def test_cleaned_at_round_trip(spec_list: list[Spec]) -> None:
    chunks, expected = build(spec_list)
    data, layout = encode_file(chunks)
    read_layout, entries = read_object(data)
    assert read_layout == layout
    footer = parse_footer(data[-FOOTER_SIZE:])
    meta = io.BytesIO(data[footer.meta_offset : footer.meta_offset + footer.meta_length])
    streamed = list(
        iter_meta(meta, footer.meta_offset, footer.meta_length, expected_crc=footer.meta_crc)
    )
    for written, (ci, _), (si, _), (tombs, times) in zip(
        layout.chunks, entries, streamed, expected, strict=True
    ):
        for index in (written, ci, si):
            check_index(index, tombs, times)
        records = iter_chunk_records(data[ci.data_pos : ci.data_end], 0, index=ci)
        assert [r.offset for r in records if r.value is None and ci.keyed] == tombs
    # Streaming chunks through open_chunk gives the same bytes and index.
    out = io.BytesIO()
    writer = FileWriter(out.write)
    for spec in spec_list:
        builder = new_builder(spec, writer)
        fill(builder, spec)
        writer.add(builder.finish())
    streamed_layout = writer.finish()
    assert out.getvalue() == data
    for ci, (tombs, times) in zip(streamed_layout.chunks, expected, strict=True):
        check_index(ci, tombs, times)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_list=specs())
def test_all_zero_times_cost_nothing(spec_list: list[Spec]) -> None:
    """Zero times written explicitly encode exactly like no times at all."""
    chunks, _ = build(spec_list)
    zeroed = [
        replace(c, tombstone_cleaned_at=np.zeros(len(c.tombstones), np.uint64)) for c in chunks
    ]
    absent = [replace(c, tombstone_cleaned_at=None) for c in chunks]
    assert encode_file(zeroed)[0] == encode_file(absent)[0]
    with_times = [c for c in chunks if c.tombstone_cleaned_at is not None]
    for c in with_times:  # non-zero times cost exactly 8 bytes per tombstone
        delta = len(encode_file([c])[0]) - len(
            encode_file([replace(c, tombstone_cleaned_at=None)])[0]
        )
        assert delta == 8 * len(c.tombstones)


@st.composite
def corruptible(draw: st.DrawFn) -> bytes:
    spec_list = draw(specs(max_chunks=3, max_ops=4))
    chunk = ChunkBuilder("z", 0, keyed=True)  # always at least one chunk with times
    raw = build_batch([(d, d, b"k%d" % d, None, ()) for d in (0, 3)])
    chunk.append_compacted(
        raw,
        base=0,
        offsets=[0, 3],
        tombstones=[0, 3],
        key_hashes=bytes(32),
        tombstone_cleaned_at=[draw(st.integers(1, MAX_MS)), draw(time_st)],
    )
    data, _ = encode_file([*build(spec_list)[0], chunk.finish()])
    return data


def read_streaming(data: bytes) -> list[Any]:
    footer = parse_footer(data[-FOOTER_SIZE:])
    meta = io.BytesIO(data[footer.meta_offset : footer.meta_offset + footer.meta_length])
    reader = DataReader(io.BytesIO(data[footer.data_offset :]), footer.data_offset)
    out = []
    for ci, hashes in iter_meta(
        meta, footer.meta_offset, footer.meta_length, expected_crc=footer.meta_crc
    ):
        reader.read_chunk(ci)
        out.append((ci, list(ci.tombstones), ci.tombstone_cleaned_at.tolist(), hashes))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=corruptible(), where=st.floats(0, 1, exclude_max=True), xor=st.integers(1, 255))
def test_any_flipped_byte_is_detected(data: bytes, where: float, xor: int) -> None:
    pos = int(where * len(data))
    bad = bytearray(data)
    bad[pos] ^= xor
    with pytest.raises(CorruptDataError):
        read_object(bytes(bad))
    if pos < OBJECT_HEADER_SIZE:  # the streaming path never reads the object header
        assert read_streaming(bytes(bad)) == read_streaming(data)
    else:
        with pytest.raises(CorruptDataError):
            read_streaming(bytes(bad))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=corruptible(), where=st.floats(0, 1, exclude_max=True))
def test_truncation_is_detected(data: bytes, where: float) -> None:
    with pytest.raises(CorruptDataError):
        read_object(data[: int(where * len(data))])
    footer = parse_footer(data)
    meta = data[footer.meta_offset : footer.meta_offset + footer.meta_length]
    with pytest.raises(TruncatedError):
        list(
            iter_meta(
                io.BytesIO(meta[: int(where * len(meta))]), footer.meta_offset, footer.meta_length
            )
        )


def test_flipped_time_is_detected() -> None:
    builder = ChunkBuilder("t", 0, keyed=True)
    raw = build_batch([(0, 1, b"k", None, ())])
    builder.append_compacted(
        raw,
        base=0,
        offsets=[0],
        tombstones=[0],
        key_hashes=bytes(16),
        tombstone_cleaned_at=[123456789],
    )
    data, layout = encode_file([builder.finish()])
    assert layout.chunks[0].tombstone_cleaned_at.tolist() == [123456789]
    pos = data.index((123456789).to_bytes(8, "big"), layout.meta_offset)
    for bit in range(64):
        bad = bytearray(data)
        bad[pos + bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptDataError):
            read_object(bytes(bad))


def compacted_builder() -> tuple[ChunkBuilder, bytes]:
    builder = ChunkBuilder("t", 0, keyed=True)
    raw = build_batch([(0, 1, b"a", None, ()), (2, 2, b"b", b"v", ()), (4, 3, b"c", None, ())])
    return builder, raw


@pytest.mark.parametrize(
    ("tombstones", "times", "match"),
    [
        ([0, 4], [1], "one value per tombstone"),
        ([0, 4], [1, 2, 3], "one value per tombstone"),
        ([0, 4], [[1, 2]], "one value per tombstone"),
        ([0, 4], [-1, 5], ">= 0"),
        ([0, 4], np.array([2**63, 1], dtype=np.uint64), "2\\*\\*63"),
        ([0, 4], [1.5, 2.0], "integers"),
        ([4, 0], [1, 2], "rise strictly"),
        ([0, 0], [1, 2], "rise strictly"),
        ([0, 1], [1, 2], "subset"),
        ([-10], [1], "subset"),
    ],
)
def test_append_compacted_rejects_bad_times(tombstones: list[int], times: Any, match: str) -> None:
    builder, raw = compacted_builder()
    with pytest.raises(ValueError, match=match):
        builder.append_compacted(
            raw,
            base=0,
            offsets=[0, 2, 4],
            tombstones=tombstones,
            key_hashes=bytes(48),
            tombstone_cleaned_at=times,
        )
    # The failed call left nothing behind: a later good call builds a clean chunk.
    builder.append_compacted(
        raw,
        base=10,
        offsets=[10, 12, 14],
        tombstones=[10, 14],
        key_hashes=bytes(48),
        tombstone_cleaned_at=[0, 7],
    )
    chunk = builder.finish()
    assert list(chunk.tombstones) == [10, 14] and chunk.record_count == 3
    assert chunk.tombstone_cleaned_at is not None
    assert chunk.tombstone_cleaned_at.tolist() == [0, 7]


def test_failed_hashes_check_does_not_record_times() -> None:
    builder, raw = compacted_builder()
    with pytest.raises(ValueError, match="hashes"):
        builder.append_compacted(
            raw,
            base=0,
            offsets=[0, 2, 4],
            tombstones=[0, 4],
            key_hashes=b"",
            tombstone_cleaned_at=[5, 6],
        )
    chunk = builder.finish()
    assert not chunk.tombstones and chunk.tombstone_cleaned_at is None


def test_unkeyed_chunk_rejects_tombstone_times() -> None:
    builder = ChunkBuilder("t", 0)
    raw = build_batch([(0, 1, b"a", None, ())])
    with pytest.raises(ValueError, match="unkeyed"):
        builder.append_compacted(raw, base=0, offsets=[0], tombstones=[0], tombstone_cleaned_at=[9])
    builder.append_compacted(raw, base=0, offsets=[0], tombstone_cleaned_at=[])
    data, _ = encode_file([builder.finish()])
    ci, _ = read_object(data)[1][0]
    assert ci.tombstone_cleaned_at.shape == (0,)


def test_caller_buffers_are_copied() -> None:
    builder, raw = compacted_builder()
    times = np.array([5, 6], dtype=np.int64)
    tombs = np.array([0, 4])
    builder.append_compacted(
        raw,
        base=0,
        offsets=[0, 2, 4],
        tombstones=tombs,
        key_hashes=bytes(48),
        tombstone_cleaned_at=times,
    )
    times[:] = 99
    tombs[:] = 2
    chunk = builder.finish()
    assert chunk.tombstone_cleaned_at is not None
    assert chunk.tombstone_cleaned_at.tolist() == [5, 6] and list(chunk.tombstones) == [0, 4]


def test_mixed_append_and_compacted_times_align() -> None:
    builder = ChunkBuilder("t", 0, hasher=HASHER)
    builder.append(1, b"x", None)  # offset 0: never cleaned
    raw = build_batch([(0, 2, b"a", None, ()), (1, 3, b"b", None, ())])
    builder.append_compacted(
        raw,
        base=5,
        offsets=[5, 6],
        tombstones=[5, 6],
        key_hashes=HASHER.hash_many([b"a", b"b"]),
        tombstone_cleaned_at=[0, 42],
    )
    builder.append(4, b"y", None)  # offset 7
    builder.append_batch(build_batch([(0, 5, b"z", None, ())]))  # offset 8
    data, layout = encode_file([builder.finish()])
    ci, _ = read_object(data)[1][0]
    assert list(ci.tombstones) == [0, 5, 6, 7, 8]
    assert ci.tombstone_cleaned_at.tolist() == [0, 0, 42, 0, 0]
    assert layout.chunks[0].tombstone_cleaned_at.tolist() == [0, 0, 42, 0, 0]


def test_writer_validates_chunk_times() -> None:
    builder, raw = compacted_builder()
    builder.append_compacted(
        raw, base=0, offsets=[0, 2, 4], tombstones=[0, 4], key_hashes=bytes(48)
    )
    chunk = builder.finish()
    for bad, match in (([1], "one value"), ([1, -2], ">= 0")):
        writer = FileWriter(io.BytesIO().write)
        with pytest.raises(ValueError, match=match):
            writer.add(replace(chunk, tombstone_cleaned_at=np.array(bad)))
        writer.add(chunk)  # nothing was claimed or written by the failed add
        assert writer.finish().chunks[0].tombstone_cleaned_at.tolist() == [0, 0]


def _block(bitmap_values: list[int], tail: bytes) -> bytes:
    from pyroaring import BitMap

    bitmap = BitMap(bitmap_values).serialize()
    return TOMB_HEAD.pack(len(bitmap)) + bitmap + tail


def test_decode_tombstone_block() -> None:
    bitmap, times = _decode_tombstones(_block([1, 9], b""))
    assert list(bitmap) == [1, 9] and times.tolist() == [0, 0]
    explicit = (0).to_bytes(8, "big") + (MAX_MS).to_bytes(8, "big")
    assert _decode_tombstones(_block([1, 9], explicit))[1].tolist() == [0, MAX_MS]
    for tail in (b"\0" * 8, b"\0" * 24, b"\0" * 15):
        with pytest.raises(CorruptDataError, match="bytes for 2 tombstones"):
            _decode_tombstones(_block([1, 9], tail))
    with pytest.raises(CorruptDataError, match="2\\*\\*63"):
        _decode_tombstones(_block([1, 9], b"\0" * 8 + (2**63).to_bytes(8, "big")))
    with pytest.raises(CorruptDataError, match="bytes for 0 tombstones"):
        _decode_tombstones(_block([], b"\0" * 8))
    with pytest.raises(CorruptDataError):
        _decode_tombstones(b"\0\0")
    with pytest.raises(CorruptDataError):
        _decode_tombstones(TOMB_HEAD.pack(100) + b"\0" * 10)
