"""The multi-partition object: round trips, streaming readers, corruption, builder contracts."""

from __future__ import annotations

import io
import itertools
import struct
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fileformat import (
    FOOTER_SIZE,
    NULL_KEY_HASH,
    Chunk,
    ChunkBuilder,
    ChunkIndex,
    Compression,
    CorruptDataError,
    DataReader,
    FileWriter,
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
    verify_batch,
)
from fileformat.errors import OldMagicError
from fileformat.objectfile import (
    ENTRY_SIZE_FIELD,
    FOOTER,
    FOOTER_CRC_POS,
    OBJECT_HEADER_SIZE,
    TRAILER,
    meta_entry_end,
)
from fileformat.stream import ReadAhead

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


def test_chunks_must_be_strictly_ordered() -> None:
    def chunk(topic: str, partition: int) -> Chunk:
        builder = ChunkBuilder(topic, partition)
        builder.append(0, None, b"x")
        return builder.finish()

    writer = FileWriter(io.BytesIO().write)
    writer.add(chunk("b", 1))
    with pytest.raises(ValueError, match="out of order"):
        writer.add(chunk("b", 1))
    with pytest.raises(ValueError, match="out of order"):
        writer.add(chunk("b", 0))
    with pytest.raises(ValueError, match="out of order"):
        writer.add(chunk("a", 9))
    writer.add(chunk("c", 0))
    assert [c.topic for c in writer.finish().chunks] == ["b", "c"]


def test_spooled_meta_matches_in_memory() -> None:
    _, chunks = two_chunk_object()
    expected, layout = encode_file(chunks)
    out = io.BytesIO()
    writer = FileWriter(out.write, spool_limit=64)  # forces the spool to disk
    for c in chunks:
        writer.add(c)
    assert writer.finish() == layout
    assert out.getvalue() == expected


def test_empty_object_and_empty_chunk() -> None:
    data, layout = encode_file([])
    assert read_object(data)[1] == [] and layout.data_length == 0
    data, layout = encode_file([ChunkBuilder("t", 0).finish()])
    ci, hashes = read_object(data)[1][0]
    assert (ci.record_count, ci.data_len, ci.offset_span, hashes) == (0, 0, 0, b"")


def aiokafka_batch(n: int, *, null_every: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=77,
        producer_epoch=3,
        base_sequence=12,
        batch_size=1 << 20,
    )
    for i in range(n):
        value = None if null_every and i % null_every == 0 else b"value-%d" % i
        builder.append(i, timestamp=500 + i, key=b"key-%d" % i, value=value, headers=[])
    return bytes(builder.build())


@pytest.mark.parametrize("keyed", [False, True])
def test_client_batches_are_stored_byte_for_byte(keyed: bool) -> None:
    builder = ChunkBuilder("t", 3, hasher=HASHER if keyed else None)
    builder.append(1, b"first", b"x")
    raw1, raw2 = aiokafka_batch(5, null_every=2), aiokafka_batch(3)
    assert builder.append_batch(raw1) == (1, 5)
    assert builder.append_batch(raw2) == (6, 3)
    data, layout = encode_file([builder.finish()])
    ci = layout.chunks[0]
    stored = data[ci.data_pos : ci.data_end]
    tail = stored[len(stored) - len(raw1) - len(raw2) :]
    assert tail[: len(raw1)][8:] == raw1[8:]
    assert tail[len(raw1) :][8:] == raw2[8:]
    assert verify_batch(tail).base_offset == 1
    assert verify_batch(tail[len(raw1) :]).base_offset == 6
    records = list(iter_chunk_records(stored, 100, index=ci))
    assert [r.offset for r in records] == list(range(100, 109))
    assert records[1].key == b"key-0" and records[1].value is None
    hashes = read_object(data)[1][0][1]
    if keyed:
        assert list(ci.tombstones) == [1, 3, 5]
        assert hashes[16:32] == HASHER.hash(b"key-0")
    else:
        assert hashes == b"" and not ci.tombstones


def test_append_batch_rejects_bad_input() -> None:
    builder = ChunkBuilder("t", 0)
    raw = bytearray(aiokafka_batch(2))
    raw[-1] ^= 1
    with pytest.raises(CorruptDataError):
        builder.append_batch(bytes(raw))
    raw = bytearray(aiokafka_batch(2))
    raw[16] = 1
    with pytest.raises(OldMagicError):
        builder.append_batch(bytes(raw))
    with pytest.raises(CorruptDataError):
        builder.append_batch(aiokafka_batch(2) + b"\0")
    assert builder.record_count == 0


def test_append_compacted_places_gapped_batches() -> None:
    builder = ChunkBuilder("t", 0, base_offset=5000, keyed=True)
    survivors = [(2, 10, b"a", b"1", ()), (5, 11, b"b", None, ()), (9, 12, b"c", b"3", ())]
    raw = build_batch(survivors, compression=Compression.ZSTD)
    hashes = HASHER.hash_many([b"a", b"b", b"c"])
    builder.append_compacted(
        raw, base=100, offsets=np.array([102, 105, 109]), tombstones=[105], key_hashes=hashes
    )
    with pytest.raises(ValueError, match="below"):
        builder.append_compacted(raw, base=105, offsets=[107, 110, 114], key_hashes=hashes)
    with pytest.raises(ValueError, match="offsets"):
        builder.append_compacted(raw, base=200, offsets=[202, 205], key_hashes=hashes)
    with pytest.raises(ValueError, match="rise"):
        builder.append_compacted(raw, base=200, offsets=[202, 202, 209], key_hashes=hashes)
    with pytest.raises(ValueError, match="hashes"):
        builder.append_compacted(raw, base=200, offsets=[202, 205, 209], key_hashes=b"")
    with pytest.raises(ValueError, match="hasher"):
        builder.append(0, b"k", b"v")
    data, _layout = encode_file([builder.finish()])
    ci, got_hashes = read_object(data)[1][0]
    assert (ci.base_offset, ci.offset_span, ci.record_count) == (5000, 110, 3)
    assert list(ci.offsets) == [102, 105, 109] and list(ci.tombstones) == [105]
    assert got_hashes == hashes
    records = list(iter_chunk_records(data[ci.data_pos : ci.data_end], ci.base_offset, index=ci))
    assert [(r.offset, r.key, r.value) for r in records] == [
        (5102, b"a", b"1"),
        (5105, b"b", None),
        (5109, b"c", b"3"),
    ]


def test_append_compacted_run_places_several_batches_or_none() -> None:
    builder = ChunkBuilder("t", 0, base_offset=0, keyed=True)
    first = build_batch([(0, 10, b"a", b"1", ()), (3, 11, b"b", None, ())])
    second = build_batch([(1, 12, b"c", b"3", ())], compression=Compression.LZ4)
    hashes = HASHER.hash_many([b"a", b"b", b"c"])
    good: dict[str, Any] = {"offsets": [10, 13, 21], "tombstones": [13], "key_hashes": hashes,
            "tombstone_cleaned_at": [7]}
    bad: list[tuple[dict[str, Any], str]] = [
        ({"bases": [10, 13]}, "below"),  # the second batch overlaps the first
        ({"bases": [10]}, "one base per batch"),
        ({"offsets": [10, 13, 20]}, "ending at its last"),
        ({"offsets": [10, 21]}, "offsets given"),
        ({"offsets": [9, 13, 21]}, "offsets must rise"),
        ({"tombstones": [12]}, "subset"),
        ({"key_hashes": hashes[:32]}, "hashes"),
    ]
    for change, match in bad:
        args: dict[str, Any] = {"bases": [10, 20], **good, **change}
        with pytest.raises(ValueError, match=match):
            builder.append_compacted_run([first, second], **args)
    assert builder.record_count == 0 and builder.next_offset == 0  # unchanged
    builder.append_compacted_run([first, second], bases=[10, 20], **good)
    assert (builder.record_count, builder.next_offset) == (3, 22)
    data, _layout = encode_file([builder.finish()])
    ci, got_hashes = read_object(data)[1][0]
    assert list(ci.offsets) == [10, 13, 21] and list(ci.tombstones) == [13]
    assert ci.tombstone_cleaned_at.tolist() == [7] and got_hashes == hashes
    records = list(iter_chunk_records(data[ci.data_pos : ci.data_end], 0, index=ci))
    assert [(r.offset, r.key) for r in records] == [(10, b"a"), (13, b"b"), (21, b"c")]


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


def test_null_key_hash() -> None:
    builder = ChunkBuilder("t", 0, hasher=HASHER)
    builder.append(0, None, b"v")
    data, _ = encode_file([builder.finish()])
    assert read_object(data)[1][0][1] == NULL_KEY_HASH


def test_open_chunk_streams_batches_and_matches_add() -> None:
    _, chunks = two_chunk_object()
    expected, layout = encode_file(chunks)
    out = io.BytesIO()
    writer = FileWriter(out.write, write_block=64)
    writer.add(chunks[0])
    builder = writer.open_chunk("b", 0, hasher=HASHER, max_batch_bytes=100)
    before = out.tell()
    for i in range(30):
        builder.append(i, b"k%d" % (i % 7), None if i % 4 == 0 else b"v" * 20)
    assert out.tell() > before  # sealed batches went out once a write block was full
    with pytest.raises(RuntimeError, match="open"):
        writer.add(chunks[1])
    writer.add(builder.finish())
    assert writer.finish() == layout
    assert out.getvalue() == expected


def test_open_chunk_respects_order() -> None:
    writer = FileWriter(io.BytesIO().write)
    writer.open_chunk("b", 0).finish()
    with pytest.raises(RuntimeError, match="open"):
        writer.open_chunk("c", 0)
    other = FileWriter(io.BytesIO().write).open_chunk("b", 0)
    other.append(0, None, b"x")
    with pytest.raises(ValueError, match="open chunk"):
        FileWriter(io.BytesIO().write).add(other.finish())
    with pytest.raises(ValueError, match="out of order"):
        writer2 = FileWriter(io.BytesIO().write)
        writer2.add(ChunkBuilder("b", 0).finish())
        writer2.open_chunk("a", 0)


def test_writer_close_abandons_cleanly() -> None:
    out = io.BytesIO()
    with FileWriter(out.write) as writer:
        writer.add(ChunkBuilder("a", 0).finish())
    with pytest.raises(RuntimeError, match="finished"):
        writer.finish()


def test_failed_append_leaves_the_builder_consistent() -> None:
    builder = ChunkBuilder("t", 0)
    with pytest.raises(TypeError):
        builder.append(0, "not bytes", b"v")  # type: ignore[arg-type]
    assert builder.finish().batch_count == 0
    builder = ChunkBuilder("t", 0)
    builder.append(0, None, b"a")
    with pytest.raises(TypeError):
        builder.append(1, "not bytes", b"v")  # type: ignore[arg-type]
    builder.append(2, None, b"c")
    data, _ = encode_file([builder.finish()])
    ci, _ = read_object(data)[1][0]
    records = list(iter_chunk_records(data[ci.data_pos : ci.data_end], 0, index=ci))
    assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"c")]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 80), max_size=20), st.integers(1, 64))
def test_read_ahead_reads_what_the_stream_holds(data: bytes, sizes: list[int],
                                                block: int) -> None:
    ahead = ReadAhead(io.BytesIO(data), block)
    plain = io.BytesIO(data)
    for n in sizes:
        assert ahead.read(n) == plain.read(n)
