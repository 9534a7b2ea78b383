"""A `FileLayout` for a file the tests describe rather than write (commits take the layout
whole)."""

from __future__ import annotations

from collections.abc import Sequence

from fileformat import FileLayout
from metadata import ChunkMeta
from metadata.segments import chunk_index


def layout(chunks: Sequence[ChunkMeta] = (), *, size: int = 1, data_offset: int = 0,
           data_length: int = 1, meta_offset: int = 0, meta_length: int = 1) -> FileLayout:
    """An object's layout holding `chunks` (META CRC 0)."""
    return FileLayout(size=size, data_offset=data_offset, data_length=data_length,
                      meta_offset=meta_offset, meta_length=meta_length, meta_crc=0,
                      chunks=[chunk_index(c) for c in chunks])
