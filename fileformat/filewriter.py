"""Writing one object as a stream (`FileWriter`): chunk data as it is added, then META and
the footer; `encode_file` writes a whole object in memory.
"""

from __future__ import annotations

import io
import tempfile
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import crc32c
import numpy as np

from fileformat.chunkbuilder import ChunkBuilder
from fileformat.keyhash import KEY_HASH_SIZE
from fileformat.objectfile import (
    CLEANED_AT_DTYPE,
    ENTRY,
    ENTRY_CRC,
    FOOTER,
    FOOTER_CRC_POS,
    FOOTER_SIZE,
    FORMAT_VERSION,
    NO_TIMES,
    OBJECT_HEADER,
    OBJECT_HEADER_SIZE,
    OBJECT_MAGIC,
    TOMB_HEAD,
    TRAILER,
    Chunk,
    ChunkIndex,
    FileLayout,
    as_cleaned_at,
    read_only,
    stats_of,
)
from fileformat.stream import COPY_BLOCK

# FileWriter hands its output on in writes of about this size by default (one syscall or
# upload-buffer append per MiB, not one per batch: an agent flush holds ~1,000 small chunks).
WRITE_BLOCK = 1 << 20


def _encode_entry(
    chunk: Chunk, times: np.ndarray[Any, np.dtype[np.int64]], data_pos: int, entry_rel: int
) -> tuple[bytes, bytes, bytes]:
    """(entry bytes incl. variable parts, key hashes, crc) for an entry at `entry_rel` in META.

    `times` are the chunk's validated first-cleaned times (one per tombstone).
    """
    topic = chunk.topic.encode()
    offsets = chunk.offsets.serialize()
    bitmap = chunk.tombstones.serialize()
    tail = times.astype(CLEANED_AT_DTYPE).tobytes() if len(times) and times.any() else b""
    tombs = TOMB_HEAD.pack(len(bitmap)) + bitmap + tail
    hashes = chunk.key_hashes
    size = ENTRY.size + len(topic) + len(offsets) + len(tombs) + len(hashes) + ENTRY_CRC.size
    hash_rel = entry_rel + ENTRY.size + len(topic) + len(offsets) + len(tombs)
    fixed = ENTRY.pack(
        size,
        chunk.partition,
        chunk.base_offset,
        data_pos,
        chunk.data_len,
        hash_rel,
        len(hashes) // KEY_HASH_SIZE,
        chunk.batch_count,
        chunk.record_count,
        chunk.offset_span,
        chunk.min_timestamp,
        chunk.max_timestamp,
        chunk.frame_crc,
        chunk.flags,
        len(topic),
        len(offsets),
        len(tombs),
    )
    entry = b"".join((fixed, topic, offsets, tombs))
    crc = crc32c.crc32c(hashes, crc32c.crc32c(entry))
    return entry, hashes, ENTRY_CRC.pack(crc)


class FileWriter:
    """Streams one object: chunk data goes out on `add`, META and footer on `finish`.

    Memory stays bounded: index entries and key hashes are spooled to a
    SpooledTemporaryFile (in memory up to `spool_limit`, then a local temp file), and the
    bytes are passed to `write` in order, in blocks of at least `write_block` bytes (a
    batch that large on its own) but the last, which `finish` writes.
    """

    def __init__(self, write: Callable[[bytes], Any], *, spool_limit: int = 8 << 20,
                 write_block: int = WRITE_BLOCK) -> None:
        self._write = write
        self._write_block = write_block
        self._spool = tempfile.SpooledTemporaryFile(max_size=spool_limit)  # noqa: SIM115
        # An abandoned writer (failed flush) must not leak the spool or warn about it.
        self._release = weakref.finalize(self, self._spool.close)
        self._meta_len = 0
        self._meta_crc = 0
        self._chunks: list[ChunkIndex] = []
        self._last: tuple[str, int] | None = None
        self._open: tuple[ChunkBuilder, int] | None = None  # streamed chunk, its data_pos
        self._done = False
        self._pending: list[bytes] = []  # written on, in order, once write_block is reached
        self._pending_len = 0
        self._emit(OBJECT_HEADER.pack(OBJECT_MAGIC, FORMAT_VERSION, 0))
        self._pos = OBJECT_HEADER_SIZE

    def __enter__(self) -> FileWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the spool without finishing (idempotent; `finish` closes it too)."""
        self._done = True
        self._release()

    def _emit(self, data: bytes) -> None:
        if len(data) >= self._write_block:
            self._drain()
            self._write(data)
            return
        self._pending.append(data)
        self._pending_len += len(data)
        if self._pending_len >= self._write_block:
            self._drain()

    def _drain(self) -> None:
        """Write what is pending, as one block."""
        pending = self._pending
        if pending:
            self._write(pending[0] if len(pending) == 1 else b"".join(pending))
            self._pending = []
            self._pending_len = 0

    def _emit_data(self, batch: bytes) -> None:
        self._emit(batch)
        self._pos += len(batch)

    def _claim(self, topic: str, partition: int) -> None:
        if self._done:
            raise RuntimeError("writer already finished")
        if self._open is not None:
            raise RuntimeError("a streamed chunk is open: finish it and add() it first")
        key = (topic, partition)
        if self._last is not None and key <= self._last:
            raise ValueError(f"chunk {key} out of order after {self._last}")
        self._last = key

    def open_chunk(self, topic: str, partition: int, **builder_args: Any) -> ChunkBuilder:
        """A ChunkBuilder whose batches are written through immediately (bounded memory).

        Call `add(builder.finish())` before opening or adding the next chunk.
        """
        self._claim(topic, partition)
        builder = ChunkBuilder(topic, partition, sink=self._emit_data, **builder_args)
        self._open = (builder, self._pos)
        return builder

    def add(self, chunk: Chunk) -> None:
        """Write `chunk`'s batches now; (topic, partition) must strictly increase."""
        times = self._cleaned_at_of(chunk)
        if chunk.streamed:
            if self._open is None or (chunk.topic, chunk.partition) != (
                self._open[0].topic,
                self._open[0].partition,
            ):
                raise ValueError("streamed chunk does not belong to this writer's open chunk")
            data_pos = self._open[1]
            self._open = None
            if self._pos - data_pos != chunk.data_len:
                raise RuntimeError("streamed chunk length does not match the bytes written")
        else:
            self._claim(chunk.topic, chunk.partition)
            data_pos = self._pos
            for batch in chunk.batches:
                self._emit_data(batch)
        entry, hashes, crc = _encode_entry(chunk, times, data_pos, self._meta_len)
        hash_rel = self._meta_len + len(entry)
        record = b"".join((entry, hashes, crc)) if hashes else entry + crc
        self._spool.write(record)
        self._meta_crc = crc32c.crc32c(record, self._meta_crc)
        self._meta_len += len(record)
        index = ChunkIndex(
            *stats_of(chunk),
            data_pos=data_pos,
            hash_pos=hash_rel,  # made absolute in finish()
            hash_count=len(hashes) // KEY_HASH_SIZE,
            tombstone_cleaned_at=times,
        )
        self._chunks.append(index)

    @staticmethod
    def _cleaned_at_of(chunk: Chunk) -> np.ndarray[Any, np.dtype[np.int64]]:
        n = len(chunk.tombstones)
        if chunk.tombstone_cleaned_at is None:
            return NO_TIMES if n == 0 else read_only(np.zeros(n, dtype=np.int64))
        return as_cleaned_at(chunk.tombstone_cleaned_at, n)

    def finish(self) -> FileLayout:
        """Write META and footer; returns the layout with absolute positions."""
        if self._done:
            raise RuntimeError("writer already finished")
        if self._open is not None:
            raise RuntimeError("a streamed chunk is still open")
        self._done = True
        meta_offset = self._pos
        data_length = meta_offset - OBJECT_HEADER_SIZE
        self._spool.seek(0)
        while block := self._spool.read(COPY_BLOCK):
            self._emit(block)
        self._release()
        trailer = TRAILER.pack(len(self._chunks), self._meta_crc)
        self._emit(trailer)
        meta_crc = crc32c.crc32c(trailer, self._meta_crc)
        meta_length = self._meta_len + TRAILER.size
        head = FOOTER.pack(
            meta_offset,
            meta_length,
            OBJECT_HEADER_SIZE,
            data_length,
            meta_crc,
            len(self._chunks),
            FORMAT_VERSION,
            0,
            0,
            OBJECT_MAGIC,
        )[:FOOTER_CRC_POS]
        footer = (
            head
            + FOOTER.pack(0, 0, 0, 0, 0, 0, 0, 0, crc32c.crc32c(head), OBJECT_MAGIC)[
                FOOTER_CRC_POS:
            ]
        )
        self._emit(footer)
        self._drain()
        # The entries are this writer's own, unseen until now: make hash_pos absolute in
        # place (dataclasses.replace costs ~10 µs a chunk, 1,000 chunks per agent flush).
        for c in self._chunks:
            object.__setattr__(c, "hash_pos", meta_offset + c.hash_pos)
        chunks = self._chunks
        return FileLayout(
            size=meta_offset + meta_length + FOOTER_SIZE,
            data_offset=OBJECT_HEADER_SIZE,
            data_length=data_length,
            meta_offset=meta_offset,
            meta_length=meta_length,
            meta_crc=meta_crc,
            chunks=chunks,
        )


def encode_file(chunks: Iterable[Chunk]) -> tuple[bytes, FileLayout]:
    """Encode a whole object in memory (tests, tools, small objects)."""
    out = io.BytesIO()
    writer = FileWriter(out.write)
    for chunk in chunks:
        writer.add(chunk)
    layout = writer.finish()
    return out.getvalue(), layout
