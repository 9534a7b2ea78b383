"""The multi-partition object: round trips, streaming readers, corruption (the builder's and
the writer's own contracts: test_chunkbuilder.py, test_filewriter.py)."""

from __future__ import annotations

import io
import itertools
import struct
from dataclasses import dataclass
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fileformat import (
    FOOTER_SIZE,
    Chunk,
    ChunkBuilder,
    ChunkIndex,
    Compression,
    CorruptDataError,
    DataReader,
    KeyHasher,
    Record,
    TruncatedError,
    UnsupportedError,
    build_batch,
    encode_file,
    iter_chunk_records,
    iter_meta,
    parse_footer,
    read_object,
)
from fileformat.objectfile import (
    ENTRY_SIZE_FIELD,
    FOOTER,
    FOOTER_CRC_POS,
    OBJECT_HEADER_SIZE,
    TRAILER,
    meta_entry_end,
)

HASHER = KeyHasher(b"cluster-secret")

optional_bytes = st.none() | st.binary(max_size=40)
headers_st = st.lists(st.tuples(st.text(max_size=4), optional_bytes), max_size=2)
record_st = st.tuples(st.integers(0, 2**42), optional_bytes, optional_bytes, headers_st)
# An op is one record for append(), or a list of records for append_batch().
op_st = st.one_of(record_st, st.lists(record_st, min_size=1, max_size=4))


@dataclass
class Spec:
    """What a test asked a ChunkBuilder to hold."""

    topic: str
    partition: int
    keyed: bool
    compression: Compression
    max_batch_bytes: int
    ops: list[Any]


@st.composite
def specs(draw: st.DrawFn, max_chunks: int = 6, max_ops: int = 12) -> list[Spec]:
    keys = draw(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "orders", "é"]), st.integers(0, 5)),
            unique=True,
            max_size=max_chunks,
        )
    )
    return [
        Spec(
            topic,
            partition,
            draw(st.booleans()),
            draw(st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD])),
            draw(st.integers(60, 400)),
            draw(st.lists(op_st, max_size=max_ops)),
        )
        for topic, partition in sorted(keys)
    ]


def build_chunks(spec_list: list[Spec]) -> tuple[list[Chunk], list[list[Any]]]:
    """Chunks plus, per chunk, the flat (ts, key, value, headers) records in offset order."""
    chunks, expected = [], []
    for spec in spec_list:
        builder = ChunkBuilder(
            spec.topic,
            spec.partition,
            hasher=HASHER if spec.keyed else None,
            compression=spec.compression,
            max_batch_bytes=spec.max_batch_bytes,
        )
        flat: list[Any] = []
        for op in spec.ops:
            if isinstance(op, tuple):
                assert builder.append(*op) == len(flat)
                flat.append(op)
            else:
                raw = build_batch(
                    [(i, ts, k, v, hs) for i, (ts, k, v, hs) in enumerate(op)],
                    base_offset=99,
                    compression=spec.compression,
                )
                assert builder.append_batch(raw) == (len(flat), len(op))
                flat.extend(op)
        assert builder.record_count == len(flat)
        chunks.append(builder.finish())
        expected.append(flat)
    return chunks, expected


def read_streaming(data: bytes) -> list[tuple[ChunkIndex, bytes, list[Record]]]:
    """Read an object the way the agent/compactor do: footer, META stream, DATA stream."""
    footer = parse_footer(data[-FOOTER_SIZE:])
    meta = io.BytesIO(data[footer.meta_offset : footer.meta_offset + footer.meta_length])
    reader = DataReader(io.BytesIO(data[footer.data_offset :]), footer.data_offset)
    out = []
    for index, hashes in iter_meta(
        meta, footer.meta_offset, footer.meta_length, expected_crc=footer.meta_crc
    ):
        chunk_data = reader.read_chunk(index)
        out.append((index, hashes, list(iter_chunk_records(chunk_data, 1000, index=index))))
    return out


def read_whole(data: bytes) -> list[tuple[ChunkIndex, bytes, list[Record]]]:
    """read_object plus decoding of every chunk."""
    _, entries = read_object(data)
    return [
        (ci, hashes, list(iter_chunk_records(data[ci.data_pos : ci.data_end], 1000, index=ci)))
        for ci, hashes in entries
    ]


def summary(result: list[tuple[ChunkIndex, bytes, list[Record]]]) -> list[Any]:
    return [(ci, list(ci.offsets), list(ci.tombstones), h, recs) for ci, h, recs in result]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_list=specs())
def test_object_round_trip(spec_list: list[Spec]) -> None:
    chunks, expected = build_chunks(spec_list)
    data, layout = encode_file(chunks)
    assert layout.size == len(data)
    read_layout, _entries = read_object(data)
    assert read_layout == layout
    for ci, written in zip(read_layout.chunks, layout.chunks, strict=True):
        assert ci.offsets == written.offsets and ci.tombstones == written.tombstones
    # META records tile the section: each ends where meta_entry_end says, the last at the trailer.
    ends = [meta_entry_end(ci.hash_pos, ci.hash_count) for ci in layout.chunks]
    for start, end in itertools.pairwise([layout.meta_offset, *ends]):
        assert start + ENTRY_SIZE_FIELD.unpack_from(data, start)[0] == end
    assert ends[-1:] in ([], [layout.meta_offset + layout.meta_length - TRAILER.size])
    assert summary(read_streaming(data)) == summary(read_whole(data))
    for (ci, hashes, records), spec, flat in zip(
        read_whole(data), spec_list, expected, strict=True
    ):
        assert (ci.topic, ci.partition, ci.base_offset) == (spec.topic, spec.partition, -1)
        assert ci.record_count == len(flat) == ci.offset_span == len(ci.offsets)
        assert records == [
            Record(1000 + i, ts, k, v, tuple(hs)) for i, (ts, k, v, hs) in enumerate(flat)
        ]
        if spec.keyed:
            assert hashes == HASHER.hash_many(k for _, k, _, _ in flat)
            assert list(ci.tombstones) == [i for i, r in enumerate(flat) if r[2] is None]
            assert data[ci.hash_pos : ci.hash_pos + len(hashes)] == hashes
        else:
            assert hashes == b"" and not ci.tombstones and ci.hash_count == 0
        if flat:
            assert ci.max_timestamp == max(r[0] for r in flat)
            undecoded = [op for op in spec.ops if isinstance(op, list)]
            if spec.keyed or not undecoded:
                assert ci.min_timestamp == min(r[0] for r in flat)
            else:  # client batches stored undecoded contribute their firstTimestamp
                assert ci.min_timestamp == min(
                    [r[0] for r in spec.ops if isinstance(r, tuple)] + [b[0][0] for b in undecoded]
                )


@st.composite
def corruptible(draw: st.DrawFn) -> bytes:
    spec_list = draw(specs(max_chunks=3, max_ops=5))
    data, _ = encode_file(build_chunks(spec_list)[0])
    return data


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=corruptible(), where=st.floats(0, 1, exclude_max=True), xor=st.integers(1, 255))
def test_any_flipped_byte_is_detected(data: bytes, where: float, xor: int) -> None:
    pos = int(where * len(data))
    bad = bytearray(data)
    bad[pos] ^= xor
    with pytest.raises(CorruptDataError):
        read_whole(bytes(bad))
    if pos < OBJECT_HEADER_SIZE:
        # The streaming path never reads the object header: provably unused bytes.
        assert summary(read_streaming(bytes(bad))) == summary(read_streaming(data))
    else:
        with pytest.raises(CorruptDataError):
            read_streaming(bytes(bad))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=corruptible(), where=st.floats(0, 1, exclude_max=True))
def test_truncation_is_detected(data: bytes, where: float) -> None:
    cut = int(where * len(data))
    with pytest.raises(CorruptDataError):
        read_whole(data[:cut])
    # Streaming with positions known from the metadata store, but a short body.
    footer = parse_footer(data)
    meta = data[footer.meta_offset : footer.meta_offset + footer.meta_length]
    short_meta = meta[: int(where * len(meta))]
    with pytest.raises(TruncatedError):
        list(iter_meta(io.BytesIO(short_meta), footer.meta_offset, footer.meta_length))
    entries = list(iter_meta(io.BytesIO(meta), footer.meta_offset, footer.meta_length))
    body = data[footer.data_offset : footer.meta_offset]
    if body:
        reader = DataReader(io.BytesIO(body[: int(where * len(body))]), footer.data_offset)
        with pytest.raises(TruncatedError):
            for index, _ in entries:
                reader.read_chunk(index)


class Dribble:
    """A stream returning at most 3 bytes per read (short reads must be handled)."""

    def __init__(self, data: bytes) -> None:
        self._buf = io.BytesIO(data)

    def read(self, n: int) -> bytes:
        return self._buf.read(min(n, 3))


def two_chunk_object() -> tuple[bytes, list[Chunk]]:
    chunks = []
    for topic in ("a", "b"):
        builder = ChunkBuilder(topic, 0, hasher=HASHER, max_batch_bytes=100)
        for i in range(30):
            builder.append(i, b"k%d" % (i % 7), None if i % 4 == 0 else b"v" * 20)
        chunks.append(builder.finish())
    data, _ = encode_file(chunks)
    return data, chunks


def test_streaming_readers_handle_short_reads_and_skips() -> None:
    data, _ = two_chunk_object()
    footer = parse_footer(data[-100:])
    meta = data[footer.meta_offset : footer.meta_offset + footer.meta_length]
    entries = list(iter_meta(Dribble(meta), footer.meta_offset, footer.meta_length))
    assert [ci.topic for ci, _ in entries] == ["a", "b"]
    reader = DataReader(Dribble(data[footer.data_offset :]), footer.data_offset)
    reader.skip_chunk(entries[0][0])
    b = reader.read_chunk(entries[1][0])
    assert b == data[entries[1][0].data_pos : entries[1][0].data_end]
    with pytest.raises(ValueError, match="behind"):
        reader.read_chunk(entries[0][0])
    # Skipping forward implicitly: read only the second chunk.
    reader = DataReader(io.BytesIO(data[footer.data_offset :]), footer.data_offset)
    assert reader.read_chunk(entries[1][0]) == b


def test_empty_object_and_empty_chunk() -> None:
    data, layout = encode_file([])
    assert read_object(data)[1] == [] and layout.data_length == 0
    data, layout = encode_file([ChunkBuilder("t", 0).finish()])
    ci, hashes = read_object(data)[1][0]
    assert (ci.record_count, ci.data_len, ci.offset_span, hashes) == (0, 0, 0, b"")


def test_unknown_version_is_unsupported() -> None:
    data, _ = encode_file([])
    footer = bytearray(data[-FOOTER_SIZE:])
    fields = list(FOOTER.unpack(bytes(footer)))
    fields[6] = 2  # version
    head = FOOTER.pack(*fields)[:FOOTER_CRC_POS]
    fields[8] = crc32c.crc32c(head)
    with pytest.raises(UnsupportedError):
        parse_footer(FOOTER.pack(*fields))


def test_iter_chunk_records_without_index_checks_span() -> None:
    data, layout = encode_file(two_chunk_object()[1])
    ci = layout.chunks[0]
    chunk = data[ci.data_pos : ci.data_end]
    assert len(list(iter_chunk_records(chunk, 0, ci.offset_span))) == 30
    with pytest.raises(CorruptDataError, match="span"):
        list(iter_chunk_records(chunk, 0, ci.offset_span - 1))
    bad = bytearray(chunk)
    struct.pack_into(">q", bad, 0, 1)  # first batch claims base 1: overlaps the next batch
    with pytest.raises(CorruptDataError):
        list(iter_chunk_records(bytes(bad), 0, ci.offset_span))
