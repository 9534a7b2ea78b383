"""`verify_streams`: an object verified from two forward-only streams (what `silt doctor
--deep` reads from the store) finds what `read_object` finds in memory."""

from __future__ import annotations

import io

import pytest

from fileformat import (
    ChunkBuilder,
    CorruptDataError,
    KeyHasher,
    TruncatedError,
    build_batch,
    encode_file,
    read_object,
    verify_streams,
)

HASHER = KeyHasher(b"cluster-secret")


def an_object() -> bytes:
    """Three chunks: a keyed one with a tombstone, two plain ones, several batches each."""
    keyed = ChunkBuilder("a", 0, keyed=True, hasher=HASHER)
    keyed.append_batch(build_batch([(0, 1, b"k1", b"v1", ()), (1, 2, b"k2", None, ())]))
    keyed.append_batch(build_batch([(0, 3, b"k1", b"v2", (("h", b"x"),))]))
    chunks = [keyed.finish()]
    for partition in (0, 1):
        plain = ChunkBuilder("b", partition)
        for i in range(3):
            plain.append_batch(build_batch([(0, 10 + i, None, b"e%d" % i, ())]))
        chunks.append(plain.finish())
    return encode_file(chunks)[0]


def streams(data: bytes, meta_offset: int) -> tuple[io.BytesIO, io.BytesIO]:
    return io.BytesIO(data[meta_offset:]), io.BytesIO(data[:meta_offset])


def test_a_good_object_gives_the_layout_read_object_gives() -> None:
    data = an_object()
    layout, _ = read_object(data)
    assert verify_streams(*streams(data, layout.meta_offset), len(data),
                          layout.meta_offset) == layout
    assert len(layout.chunks) == 3


def test_every_flipped_byte_is_detected() -> None:
    data = an_object()
    meta_offset = read_object(data)[0].meta_offset
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x20
        with pytest.raises(CorruptDataError):
            verify_streams(*streams(bytes(bad), meta_offset), len(data), meta_offset)


def test_meta_elsewhere_than_the_caller_says_is_corrupt() -> None:
    data = an_object()
    meta_offset = read_object(data)[0].meta_offset
    for wrong in (meta_offset - 1, meta_offset + 1, 4, len(data)):
        with pytest.raises(CorruptDataError):
            verify_streams(*streams(data, wrong), len(data), wrong)


@pytest.mark.parametrize("cut", [1, 10, 100])
def test_a_stream_that_ends_early_is_truncated(cut: int) -> None:
    data = an_object()
    meta_offset = read_object(data)[0].meta_offset
    tail, head = streams(data, meta_offset)
    with pytest.raises(TruncatedError):
        verify_streams(io.BytesIO(tail.read()[:-cut]), head, len(data), meta_offset)
    tail, head = streams(data, meta_offset)
    with pytest.raises(TruncatedError):
        verify_streams(tail, io.BytesIO(head.read()[:-cut]), len(data), meta_offset)
