"""Verifying a whole object: `read_object` in memory, `verify_streams` from two
forward-only streams; every byte is checked against some checksum.
"""

from __future__ import annotations

import io

import crc32c

from fileformat.datareader import DataReader
from fileformat.errors import CorruptDataError
from fileformat.metareader import iter_meta
from fileformat.objectfile import (
    FOOTER_SIZE,
    OBJECT_HEADER_SIZE,
    ChunkIndex,
    FileLayout,
    check_object_header,
    parse_footer,
    sections_of,
)
from fileformat.stream import Readable, read_exact


def read_object(data: bytes) -> tuple[FileLayout, list[tuple[ChunkIndex, bytes]]]:
    """Fully verify an in-memory object; returns its layout and (index, key hashes) pairs."""
    footer = parse_footer(data)
    if footer.meta_offset + footer.meta_length + FOOTER_SIZE != len(data):
        raise CorruptDataError(
            f"footer describes {footer.meta_offset + footer.meta_length + FOOTER_SIZE} "
            f"bytes, object has {len(data)}"
        )
    view = memoryview(data)
    return _verify(io.BytesIO(view[footer.meta_offset :]), io.BytesIO(view[: footer.meta_offset]),
                   len(data), footer.meta_offset, keep_hashes=True)


def verify_streams(tail: Readable, head: Readable, size: int, meta_offset: int) -> FileLayout:
    """Fully verify an object of `size` bytes read as two forward-only streams, `tail` over
    [meta_offset, size) (META, then the footer) and `head` over [0, meta_offset) (header,
    then DATA): every check of `read_object`, holding one chunk at a time (and the index).

    `meta_offset` is where the caller believes META starts (a file row's); a footer saying
    otherwise is CorruptDataError, as is any failed check (TruncatedError: a stream ended).
    """
    return _verify(tail, head, size, meta_offset, keep_hashes=False)[0]


class _Checksummed:
    """A Readable that keeps the CRC32C of every byte read through it."""

    def __init__(self, stream: Readable) -> None:
        self._stream = stream
        self.crc = 0

    def read(self, n: int, /) -> bytes:
        data = self._stream.read(n)
        self.crc = crc32c.crc32c(data, self.crc)
        return data


def _verify(tail: Readable, head: Readable, size: int, meta_offset: int, *,
            keep_hashes: bool) -> tuple[FileLayout, list[tuple[ChunkIndex, bytes]]]:
    """`read_object` and `verify_streams`: META (each entry, its trailer and the section's
    CRC), the footer against where META was read, the header, then every chunk's batches
    against its index entry; the key hashes are kept only with `keep_hashes`."""
    meta_length = size - FOOTER_SIZE - meta_offset
    if meta_offset < OBJECT_HEADER_SIZE or meta_length < 0:
        raise CorruptDataError(f"meta at {meta_offset} of a {size}-byte object")
    meta = _Checksummed(tail)
    entries = [(index, hashes if keep_hashes else b"")
               for index, hashes in iter_meta(meta, meta_offset, meta_length)]
    footer = parse_footer(read_exact(tail, FOOTER_SIZE, "footer"))
    if (footer.meta_offset, footer.meta_length) != (meta_offset, meta_length):
        raise CorruptDataError(
            f"footer places meta at {footer.meta_offset} ({footer.meta_length} bytes),"
            f" read at {meta_offset} ({meta_length} bytes)"
        )
    if meta.crc != footer.meta_crc:
        raise CorruptDataError(f"meta section CRC32C {meta.crc:#010x} != {footer.meta_crc:#010x}")
    if len(entries) != footer.chunk_count:
        raise CorruptDataError(f"footer says {footer.chunk_count} chunks, meta has {len(entries)}")
    check_object_header(read_exact(head, OBJECT_HEADER_SIZE, "object header"), footer.version)
    data = DataReader(head, footer.data_offset)
    for index, _ in entries:  # the chunks tile the data section (checked by iter_meta)
        data.read_chunk(index)
    layout = FileLayout(*sections_of(footer), size=size, meta_crc=footer.meta_crc,
                        chunks=[c for c, _ in entries])
    return layout, entries
