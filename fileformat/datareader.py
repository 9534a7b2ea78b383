"""Reading an object's DATA section: a chunk's batches verified against its index entry
(`verify_chunk`, `iter_chunk_records`, `chunk_batches`), and `DataReader`, chunk by chunk from a
forward-only stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import crc32c

from fileformat.batch import (
    FRAME_SIZE,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    Record,
    check_batch,
    iter_records,
    read_header,
)
from fileformat.errors import CorruptDataError
from fileformat.objectfile import OBJECT_HEADER_SIZE, ChunkIndex
from fileformat.stream import COPY_BLOCK, Readable, read_exact


def _walk_chunk(
    data: Any, offset_span: int | None, index: ChunkIndex | None
) -> list[tuple[BatchHeader, memoryview]]:
    """Verify every batch of a chunk and its framing; the list is safe to decode."""
    view = memoryview(data)
    if index is not None:
        if len(view) != index.data_len:
            raise CorruptDataError(f"chunk is {len(view)} bytes, index says {index.data_len}")
        offset_span = index.offset_span
    out: list[tuple[BatchHeader, memoryview]] = []
    pos = 0
    end = len(view)
    next_rel = 0
    records = 0
    frame = 0
    while pos < end:
        header = read_header(view, pos)
        if header.base_offset < next_rel:
            raise CorruptDataError(
                f"batch at {pos}: base offset {header.base_offset} below {next_rel}"
            )
        next_rel = header.next_offset
        if offset_span is not None and next_rel > offset_span:
            raise CorruptDataError(f"batch at {pos}: offsets reach {next_rel} > span {offset_span}")
        check_batch(view, header, pos)
        frame = crc32c.crc32c(view[pos : pos + FRAME_SIZE], frame)
        out.append((header, view[pos : pos + header.length]))
        records += header.record_count
        pos += header.length
    if index is not None:
        if frame != index.frame_crc:
            raise CorruptDataError(
                f"chunk ({index.topic!r}, {index.partition}): batch framing CRC32C "
                f"{frame:#010x} != {index.frame_crc:#010x}"
            )
        if len(out) != index.batch_count or records != index.record_count:
            raise CorruptDataError(
                f"chunk ({index.topic!r}, {index.partition}): {len(out)} batches / {records} "
                f"records, index says {index.batch_count} / {index.record_count}"
            )
    return out


def verify_chunk(data: Any, index: ChunkIndex) -> None:
    """Check a chunk's bytes against its index entry (CRCs, framing, counts)."""
    _walk_chunk(data, None, index)


def chunk_batches(data: Any, index: ChunkIndex) -> list[tuple[BatchHeader, memoryview]]:
    """A chunk's batches (header, bytes), every one verified against the index entry
    before any is returned: for readers that need each batch's attributes (timestamp type,
    control batches) as well as its records (`iter_records`)."""
    return _walk_chunk(data, None, index)


def iter_chunk_records(
    data: Any,
    base_offset: int,
    offset_span: int | None = None,
    *,
    index: ChunkIndex | None = None,
) -> Iterator[Record]:
    """Decode a chunk's records with absolute offsets (base_offset + relative).

    All batches are verified before the first record is yielded. Pass `index` to also check
    the framing CRC and counts (recommended: without it a corrupted baseOffset that stays
    inside the span cannot be told apart from a real one).
    """
    for header, view in _walk_chunk(data, offset_span, index):
        yield from iter_records(view, header, base_offset)


def iter_headers(stream: Readable, length: int) -> Iterator[BatchHeader]:
    """The batch headers of a chunk's `length` bytes read forward from `stream`, record
    bytes skipped (memory: one header): for readers that need only batch attributes and
    producers (the compactor finding aborted transactions' records). Framing is checked,
    CRCs are not (the batches' own reader checks them)."""
    pos = 0
    while pos < length:
        if length - pos < HEADER_SIZE:
            raise CorruptDataError(f"batch header at {pos} runs past the chunk ({length})")
        raw = read_exact(stream, HEADER_SIZE, "a batch header")
        (base, size, epoch, magic, crc, attrs, lod, first_ts, max_ts, pid, pep, bseq,
         count) = HEADER.unpack_from(raw)
        total = size + LOG_OVERHEAD
        if magic != MAGIC or total < HEADER_SIZE or pos + total > length or count < 0:
            raise CorruptDataError(f"batch at {pos}: bad magic, length or record count")
        yield BatchHeader(base, total, epoch, crc, attrs, lod, first_ts, max_ts, pid, pep,
                          bseq, count)
        rest = total - HEADER_SIZE
        while rest > 0:
            rest -= len(read_exact(stream, min(rest, COPY_BLOCK), "skipped records"))
        pos += total


class DataReader:
    """Reads the DATA section chunk by chunk from a forward-only stream."""

    def __init__(self, stream: Readable, data_offset: int = OBJECT_HEADER_SIZE) -> None:
        self._stream = stream
        self._pos = data_offset

    @property
    def position(self) -> int:
        """Absolute object position of the next unread byte."""
        return self._pos

    def _discard(self, n: int) -> None:
        while n > 0:
            step = min(n, COPY_BLOCK)
            read_exact(self._stream, step, "skipped data")
            n -= step

    def _advance_to(self, index: ChunkIndex) -> None:
        if index.data_pos < self._pos:
            raise ValueError(f"chunk at {index.data_pos} is behind the stream position {self._pos}")
        gap = index.data_pos - self._pos
        self._discard(gap)
        self._pos += gap

    def read_chunk(self, index: ChunkIndex) -> bytes:
        """Read and verify one chunk's batches (skipping forward to it if needed)."""
        data = self._read(index)
        verify_chunk(data, index)
        return data

    def read_batches(self, index: ChunkIndex) -> list[tuple[BatchHeader, memoryview]]:
        """`read_chunk`, returning its verified batches as (header, view) slices of it."""
        return _walk_chunk(self._read(index), None, index)

    def _read(self, index: ChunkIndex) -> bytes:
        self._advance_to(index)
        data = read_exact(self._stream, index.data_len, f"chunk {index.topic!r}")
        self._pos += index.data_len
        return data

    def skip_chunk(self, index: ChunkIndex) -> None:
        """Read past one chunk without keeping or verifying it."""
        self._advance_to(index)
        self._discard(index.data_len)
        self._pos += index.data_len
