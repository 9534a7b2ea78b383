"""Pass 1 of Kafka's two-pass dedupe: which records of a partition survive, in memory
bounded by the offset map, not by the job's records.

Kafka's cleaner builds an offset map key-hash -> latest offset over the dirty records of
the cleanable range [dirty start, first uncleanable offset), in offset order; when the map
(log.cleaner.dedupe.buffer.size) is full it stops early and everything from that record on
is kept as it is ("partial cleaning": the next clean goes on from there, Kafka's several
passes). Pass 2 keeps a record iff the map holds no later record of its key. We do the
same: pass 1 streams each input's key hashes block by block into the compiled map
(`offsetmap.OffsetMap`, 20 B per slot, at most `memory_budget / MAP_BYTES_PER_KEY` keys)
and into a spool (`offsetmap.HashSpool`: memory up to 8 MiB, a temp file beyond) that pass 2
reads back in order. Positions (a record's ordinal among the partition's records in the
job) stand in for offsets: they order the same way and fit in 4 bytes. Null keys are never
map entries and always kept. A record that is the latest for its key is never dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from fileformat import KEY_HASH_SIZE

from .offsetmap import HashSpool, OffsetMap

# Kafka's SkimpyOffsetMap spends 16 bytes of MD5 + 8 bytes of offset per key; ours spends
# 20 B per slot at load <= 0.9 (22.2 B per key), 23.6 B per key while it grows.
MAP_BYTES_PER_KEY = 24
DEFAULT_MEMORY_BUDGET = 128 * 1024 * 1024
READ_BLOCK = 1 << 16  # hashes per read of an input's META stream (1 MiB)

Mask = np.ndarray[Any, np.dtype[np.bool_]]


def map_capacity(memory_budget: int) -> int:
    """Keys the offset map may hold within `memory_budget` bytes (at least one)."""
    return max(1, memory_budget // MAP_BYTES_PER_KEY)


class HashSource(Protocol):
    """Key hashes read forward in blocks (`fileformat.EntryHashes`)."""

    def read(self, max_hashes: int, /) -> bytes: ...


class Pass1:
    """What pass 1 learnt about one partition: the map, where it ends, the spooled hashes.
    Pass 2 takes the records' survivors chunk by chunk, in order (`take`)."""

    def __init__(self, omap: OffsetMap | None, spool: HashSpool, map_end: int,
                 null_keys: int) -> None:
        self.map = omap
        self.spool = spool
        self.map_end = map_end  # position of the first record NOT covered by the map
        self.null_keys = null_keys  # null-key records in the map's range (kept)
        self._next = 0

    @property
    def distinct_keys(self) -> int:
        """Keys held in the map."""
        return 0 if self.map is None else len(self.map)

    def take(self, count: int) -> tuple[bytes, Mask]:
        """The next `count` records' key hashes and keep-mask: a record goes iff it lies
        before the map's end and the map holds a later record of its key."""
        hashes = self.spool.read(count * KEY_HASH_SIZE)
        keep = np.ones(count, dtype=np.bool_)
        if self.map is not None and count:
            self.map.survivors(hashes, self._next, self.map_end, keep.data)
        self._next += count
        return hashes, keep


def pass1(sources: Sequence[HashSource], window: tuple[int, int] | None, capacity: int,
          spool: HashSpool) -> Pass1:
    """Read every source's hashes (the partition's records in offset order) into `spool`;
    with a `window` [dirty start, cleanable end) of positions, also into an offset map of
    at most `capacity` keys, which ends early when full. The window's length bounds its
    distinct keys, so the map never grows past what the window could fill (a job smaller
    than the budget costs ~22 B per key, not the budget)."""
    lo, hi = window or (0, 0)
    omap = OffsetMap(max(1, min(capacity, hi - lo))) if window is not None else None
    map_end, full, nulls, pos = hi, False, 0, 0
    for source in sources:
        while block := source.read(READ_BLOCK):
            spool.write(block)
            k = len(block) // KEY_HASH_SIZE
            a, b = max(lo, pos), min(hi, pos + k)
            if omap is not None and not full and a < b:
                view = memoryview(block)[(a - pos) * KEY_HASH_SIZE : (b - pos) * KEY_HASH_SIZE]
                consumed, n_null = omap.insert(view, a)
                nulls += n_null
                if consumed < b - a:
                    full, map_end = True, a + consumed
            pos += k
    return Pass1(omap, spool, map_end if omap is not None else 0, nulls)


@dataclass(frozen=True, slots=True)
class DedupeResult:
    """Survivors of pass 1 and where the offset map stopped."""

    keep: Mask  # per input record, in offset order
    map_end: int  # index of the first record NOT covered by the map (kept as it is)
    distinct_keys: int  # keys held in the map
    null_keys: int  # records with a null key in the map's range (kept)


class _Bytes:
    """A HashSource over bytes in memory."""

    def __init__(self, data: bytes) -> None:
        self._view, self._pos = memoryview(data), 0

    def read(self, max_hashes: int, /) -> bytes:
        out = bytes(self._view[self._pos : self._pos + max_hashes * KEY_HASH_SIZE])
        self._pos += len(out)
        return out


def dedupe(hashes: bytes, cleanable: int, capacity: int, dirty_start: int = 0) -> DedupeResult:
    """Both passes over records [0, n) whose 16-byte key hashes are `hashes`, in offset
    order: the map is built from the dirty records [dirty_start, cleanable) (those below
    the first uncleanable offset, after the cleaner checkpoint) with at most `capacity`
    keys; a record before the map's end goes iff the map holds a later record of its key."""
    if len(hashes) % KEY_HASH_SIZE:
        raise ValueError("key hash bytes are not a multiple of 16")
    n = len(hashes) // KEY_HASH_SIZE
    dirty_start = min(max(dirty_start, 0), n)
    cleanable = max(min(cleanable, n), dirty_start)
    with HashSpool() as spool:
        result = pass1([_Bytes(hashes)], (dirty_start, cleanable), capacity, spool)
        _, keep = result.take(n)
    return DedupeResult(keep, result.map_end, result.distinct_keys, result.null_keys)
