"""Reading an object's META section forward-only: `iter_meta` (each entry with its key
hashes) and `iter_meta_streamed` (each entry's key hashes read in blocks as asked).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import crc32c
import numpy as np
from pyroaring import BitMap

from fileformat.errors import CorruptDataError
from fileformat.keyhash import KEY_HASH_SIZE
from fileformat.objectfile import (
    CLEANED_AT_DTYPE,
    ENTRY,
    ENTRY_CRC,
    FLAG_KEYED,
    KNOWN_FLAGS,
    MAX_OFFSET_SPAN,
    NO_TIMES,
    OBJECT_HEADER_SIZE,
    TOMB_HEAD,
    TRAILER,
    ChunkIndex,
    read_only,
)
from fileformat.stream import COPY_BLOCK, Readable, read_exact


def _decode_tombstones(raw: bytes) -> tuple[BitMap, np.ndarray[Any, np.dtype[np.int64]]]:
    """The tombstone block: bitmap and per-tombstone first-cleaned times."""
    if len(raw) < TOMB_HEAD.size:
        raise CorruptDataError("tombstone block shorter than its header")
    (blen,) = TOMB_HEAD.unpack_from(raw)
    if blen > len(raw) - TOMB_HEAD.size:
        raise CorruptDataError("tombstone bitmap length outside its block")
    bitmap = _deserialize(raw[TOMB_HEAD.size : TOMB_HEAD.size + blen], "tombstones")
    tail = raw[TOMB_HEAD.size + blen :]
    if not tail:
        return bitmap, NO_TIMES if not bitmap else read_only(np.zeros(len(bitmap), np.int64))
    if len(tail) != CLEANED_AT_DTYPE.itemsize * len(bitmap):
        raise CorruptDataError(f"tombstone times: {len(tail)} bytes for {len(bitmap)} tombstones")
    stored = np.frombuffer(tail, dtype=CLEANED_AT_DTYPE)
    if int(stored.max()) >= 2**63:
        raise CorruptDataError("tombstone first-cleaned time beyond 2**63 - 1 ms")
    return bitmap, read_only(stored.astype(np.int64))


def _deserialize(raw: bytes, what: str) -> BitMap:
    try:
        return BitMap.deserialize(raw)
    except Exception as exc:  # pyroaring raises ValueError/OverflowError on bad input
        raise CorruptDataError(f"{what} bitmap does not deserialize: {exc}") from exc


class EntryHashes:
    """The key hashes of one META entry, read forward in blocks (`iter_meta_streamed`).

    The entry's CRC covers them and is checked once the last one is read; whatever the
    consumer leaves unread is read (and checked) before the next entry.
    """

    __slots__ = ("_crc", "_left", "_running", "_stream", "_where", "count")

    def __init__(self, stream: Readable, count: int, crc: int, running: int, where: str) -> None:
        self._stream = stream
        self._left = count * KEY_HASH_SIZE
        self._crc = crc
        self._running = running
        self._where = where
        self.count = count
        """How many hashes the entry holds."""
        if not self._left:
            self._check()

    @property
    def remaining(self) -> int:
        """Hashes not read yet."""
        return self._left // KEY_HASH_SIZE

    def read(self, max_hashes: int) -> bytes:
        """Up to `max_hashes` next hashes (16 bytes each); b"" once all were read."""
        n = min(self._left, max(max_hashes, 1) * KEY_HASH_SIZE)
        if not n:
            return b""
        data = read_exact(self._stream, n, f"{self._where} key hashes")
        self._crc = crc32c.crc32c(data, self._crc)
        self._running = crc32c.crc32c(data, self._running)
        self._left -= n
        if not self._left:
            self._check()
        return data

    def read_all(self) -> bytes:
        """Every hash not read yet."""
        return self.read(self.remaining) if self._left else b""

    def _check(self) -> None:
        raw = read_exact(self._stream, ENTRY_CRC.size, f"{self._where} CRC")
        (stored,) = ENTRY_CRC.unpack(raw)
        if self._crc != stored:
            raise CorruptDataError(f"{self._where}: CRC32C {self._crc:#010x} != {stored:#010x}")
        self._running = crc32c.crc32c(raw, self._running)
        self._crc = -1  # checked

    def _finish(self) -> int:
        """Read what is left; the running CRC of the META section after this entry."""
        while self._left:
            self.read(COPY_BLOCK // KEY_HASH_SIZE)
        return self._running


def iter_meta(
    stream: Readable,
    meta_offset: int,
    meta_length: int,
    *,
    expected_crc: int | None = None,
) -> Iterator[tuple[ChunkIndex, bytes]]:
    """Yield (ChunkIndex, key_hashes) from a stream positioned at the META section.

    Reads exactly `meta_length` bytes forward-only. Each entry is CRC-checked before it is
    yielded; the trailer (chunk count + CRC of all entries) and, if given, the footer's
    `expected_crc` of the whole section are checked at the end.
    """
    for index, hashes in iter_meta_streamed(stream, meta_offset, meta_length,
                                            expected_crc=expected_crc):
        yield index, hashes.read_all()


def iter_meta_streamed(
    stream: Readable,
    meta_offset: int,
    meta_length: int,
    *,
    expected_crc: int | None = None,
) -> Iterator[tuple[ChunkIndex, EntryHashes]]:
    """`iter_meta` without holding an entry's key hashes: yield (ChunkIndex, EntryHashes)
    as soon as an entry's fixed part, topic, offsets and tombstones are read; the hashes
    are then read in blocks as the consumer asks (memory per block, not per chunk). The
    entry's CRC is checked after its last hash, so its index is not trustworthy until the
    consumer read every hash (or the next entry was asked for)."""
    if meta_length < TRAILER.size:
        raise CorruptDataError(f"meta section of {meta_length} bytes cannot hold its trailer")
    end = meta_length - TRAILER.size
    pos = 0
    running = 0
    count = 0
    prev: tuple[str, int] | None = None
    next_data = OBJECT_HEADER_SIZE
    var_fixed = ENTRY.size + ENTRY_CRC.size
    while pos < end:
        if end - pos < var_fixed:
            raise CorruptDataError(f"meta entry at {pos}: {end - pos} bytes left, too short")
        fixed = read_exact(stream, ENTRY.size, f"meta entry at {pos}")
        (
            size,
            partition,
            base,
            data_pos,
            data_len,
            hash_rel,
            hash_count,
            batch_count,
            record_count,
            span,
            min_ts,
            max_ts,
            frame_crc,
            flags,
            topic_len,
            offsets_len,
            tombs_len,
        ) = ENTRY.unpack(fixed)
        if size < var_fixed or size > end - pos:
            raise CorruptDataError(f"meta entry at {pos}: size {size} outside the section")
        hashes_len = size - var_fixed - topic_len - offsets_len - tombs_len
        if hashes_len != hash_count * KEY_HASH_SIZE:
            raise CorruptDataError(f"meta entry at {pos}: field lengths do not add up to {size}")
        head_len = topic_len + offsets_len + tombs_len
        rest = read_exact(stream, head_len, f"meta entry at {pos}")
        crc = crc32c.crc32c(rest, crc32c.crc32c(fixed))
        running = crc32c.crc32c(rest, crc32c.crc32c(fixed, running))
        view = memoryview(rest)
        try:
            topic = bytes(view[:topic_len]).decode()
        except UnicodeDecodeError as exc:
            raise CorruptDataError(f"meta entry at {pos}: topic is not utf-8") from exc
        cut = topic_len + offsets_len
        offsets = _deserialize(bytes(view[topic_len:cut]), "offsets")
        tombstones, cleaned_at = _decode_tombstones(bytes(view[cut : cut + tombs_len]))
        where = f"meta entry {count} ({topic!r}, {partition})"
        key = (topic, partition)
        if prev is not None and key <= prev:
            raise CorruptDataError(f"{where}: chunks out of order after {prev}")
        if data_pos != next_data:
            raise CorruptDataError(f"{where}: data_pos {data_pos}, expected {next_data}")
        if hash_rel != pos + ENTRY.size + cut + tombs_len:
            raise CorruptDataError(f"{where}: hash position does not match the entry")
        _check_index_semantics(
            where,
            flags,
            record_count,
            hash_count,
            batch_count,
            data_len,
            span,
            offsets,
            tombstones,
        )
        prev = key
        next_data = data_pos + data_len
        index = ChunkIndex(
            topic,
            partition,
            base,
            data_len,
            batch_count,
            record_count,
            span,
            min_ts,
            max_ts,
            offsets,
            tombstones,
            flags,
            frame_crc,
            data_pos=data_pos,
            hash_pos=meta_offset + hash_rel,
            hash_count=hash_count,
            tombstone_cleaned_at=cleaned_at,
        )
        hashes = EntryHashes(stream, hash_count, crc, running, where)
        pos += size
        count += 1
        yield index, hashes
        running = hashes._finish()
    if pos != end:
        raise CorruptDataError(f"meta entries overrun the trailer by {pos - end} bytes")
    trailer = read_exact(stream, TRAILER.size, "meta trailer")
    stored_count, stored_crc = TRAILER.unpack(trailer)
    if stored_crc != running:
        raise CorruptDataError(f"meta entries CRC32C {running:#010x} != {stored_crc:#010x}")
    if stored_count != count:
        raise CorruptDataError(f"meta trailer says {stored_count} chunks, read {count}")
    if next_data != meta_offset:
        raise CorruptDataError(f"chunks end at {next_data}, meta starts at {meta_offset}")
    if expected_crc is not None:
        whole = crc32c.crc32c(trailer, running)
        if whole != expected_crc:
            raise CorruptDataError(f"meta section CRC32C {whole:#010x} != {expected_crc:#010x}")


def _check_index_semantics(
    where: str,
    flags: int,
    record_count: int,
    hash_count: int,
    batch_count: int,
    data_len: int,
    span: int,
    offsets: BitMap,
    tombstones: BitMap,
) -> None:
    """Invariants every entry written by ChunkBuilder satisfies."""
    if flags & ~KNOWN_FLAGS:
        raise CorruptDataError(f"{where}: unknown flags {flags:#x}")
    if len(offsets) != record_count:
        raise CorruptDataError(f"{where}: {len(offsets)} offsets for {record_count} records")
    if (offsets and offsets.max() >= span) or span > MAX_OFFSET_SPAN:
        raise CorruptDataError(f"{where}: offsets reach beyond offset_span {span}")
    if not tombstones.issubset(offsets):
        raise CorruptDataError(f"{where}: tombstones outside the present offsets")
    if flags & FLAG_KEYED:
        if hash_count != record_count:
            raise CorruptDataError(f"{where}: {hash_count} key hashes for {record_count} records")
    elif hash_count or tombstones:
        raise CorruptDataError(f"{where}: key hashes/tombstones in an unkeyed chunk")
    if (record_count == 0) != (batch_count == 0) or (batch_count == 0) != (data_len == 0):
        raise CorruptDataError(f"{where}: empty/non-empty mismatch of records, batches, data")
