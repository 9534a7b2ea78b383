"""iter_meta_streamed: an entry's key hashes read in blocks, checked as iter_meta checks them."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fileformat import (
    ChunkBuilder,
    ChunkIndex,
    CorruptDataError,
    KeyHasher,
    encode_file,
    iter_meta,
    iter_meta_streamed,
    parse_footer,
)

HASHER = KeyHasher(b"cluster-secret")


def meta_of(records_per_chunk: list[int]) -> tuple[bytes, int, int]:
    """(META section, meta_offset, meta_length) of an object of keyed chunks."""
    chunks = []
    for n, topic in zip(records_per_chunk, "abcdef", strict=False):
        builder = ChunkBuilder(topic, 0, hasher=HASHER, max_batch_bytes=200)
        for i in range(n):
            builder.append(i, b"k%d" % (i % 11), b"v")
        chunks.append(builder.finish())
    data, _ = encode_file(chunks)
    footer = parse_footer(data)
    meta = data[footer.meta_offset : footer.meta_offset + footer.meta_length]
    return meta, footer.meta_offset, footer.meta_length


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=4),
       block=st.integers(1, 50), skip=st.sets(st.integers(0, 3)))
def test_blocks_give_what_iter_meta_gives(counts: list[int], block: int,
                                          skip: set[int]) -> None:
    meta, offset, length = meta_of(counts)
    want = list(iter_meta(io.BytesIO(meta), offset, length))
    got: list[tuple[ChunkIndex, bytes | None]] = []
    for n, (index, hashes) in enumerate(iter_meta_streamed(io.BytesIO(meta), offset, length)):
        assert hashes.count == index.hash_count
        if n in skip:  # left unread: read and checked before the next entry
            got.append((index, None))
            continue
        parts = []
        while part := hashes.read(block):
            assert len(part) <= 16 * block
            parts.append(part)
        assert hashes.remaining == 0
        got.append((index, b"".join(parts)))
    assert [ci for ci, _ in got] == [ci for ci, _ in want]
    for (_, g), (_, w) in zip(got, want, strict=True):
        assert g is None or g == w


def test_a_flipped_hash_is_caught_after_the_last_block() -> None:
    meta, offset, length = meta_of([30])
    (index, _), = iter_meta(io.BytesIO(meta), offset, length)
    bad = bytearray(meta)
    bad[index.hash_pos - offset + 16 * 29] ^= 1  # the last hash
    (_, hashes), = [next(iter_meta_streamed(io.BytesIO(bytes(bad)), offset, length))]
    assert len(hashes.read(29)) == 16 * 29  # not yet known
    with pytest.raises(CorruptDataError, match="CRC32C"):
        hashes.read(1)
    # Skipped hashes are checked too, before the next entry (or the trailer).
    with pytest.raises(CorruptDataError, match="CRC32C"):
        list(iter_meta_streamed(io.BytesIO(bytes(bad)), offset, length))
