"""FileWriter: chunk order, the spooled META, streamed chunks, block writes."""

from __future__ import annotations

import io

import pytest

from fileformat import (
    Chunk,
    ChunkBuilder,
    FileWriter,
    encode_file,
)
from tests.fileformat.test_fileformat_objectfile import HASHER, two_chunk_object


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


def test_file_writer_writes_blocks_and_the_same_bytes() -> None:
    """An agent-like flush (500 small chunks) leaves the writer in ~1 MiB writes, not one
    per batch, and the object is byte for byte what the write-through writer makes."""
    builders = []
    for p in range(500):
        b = ChunkBuilder("t", p)
        for i in range(3):
            b.append(1_700_000_000_000 + i, b"k%d" % i, b"v" * 1000)
        builders.append(b)
    chunks = [b.finish() for b in builders]
    writes: list[int] = []
    out = io.BytesIO()

    def write(data: bytes) -> None:
        writes.append(len(data))
        out.write(data)

    writer = FileWriter(write)
    for c in chunks:
        writer.add(c)
    layout = writer.finish()
    expected, expected_layout = encode_file(chunks)
    assert out.getvalue() == expected
    assert layout == expected_layout
    assert len(writes) <= len(expected) // (1 << 20) + 2
    assert all(n >= 1 << 20 for n in writes[:-1])
    through: list[int] = []
    through_writer = FileWriter(lambda d: through.append(len(d)), write_block=1)
    for c in chunks:
        through_writer.add(c)
    through_writer.finish()
    assert sum(through) == len(expected) and len(through) > 500  # a write per batch
