"""Pass 1 of Kafka's two-pass dedupe, vectorised: which records of a partition survive.

Input: the partition's records in offset order as (absolute offset, 16-byte keyed hash)
arrays, concatenated over the job's input files. Kafka's cleaner builds an offset map
key-hash -> latest offset over the cleanable range [start, end) and keeps a record iff the
map says it is the latest for its key; when the map (log.cleaner.dedupe.buffer.size) is
full it stops early and everything from that offset on is kept as it is ("partial
cleaning"). We do the same with numpy: a stable sort by key hash groups each key's
records in offset order; the last of each group is the latest. A record that is the latest
for its key is never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fileformat import KEY_HASH_SIZE

# Kafka's SkimpyOffsetMap spends 16 bytes of MD5 + 8 bytes of offset per key.
MAP_BYTES_PER_KEY = 24
DEFAULT_MEMORY_BUDGET = 128 * 1024 * 1024

U64 = np.ndarray[Any, np.dtype[np.uint64]]
I64 = np.ndarray[Any, np.dtype[np.int64]]
Mask = np.ndarray[Any, np.dtype[np.bool_]]


@dataclass(frozen=True, slots=True)
class DedupeResult:
    """Survivors of pass 1 and where the offset map stopped."""

    keep: Mask  # per input record, in offset order
    map_end: int  # index of the first record NOT covered by the map (kept as it is)
    distinct_keys: int  # keys held in the map
    null_keys: int  # records with a null key (kept; cannot exist on compacted topics)


def split_hashes(hashes: bytes) -> tuple[U64, U64]:
    """View 16-byte hashes as (high, low) big-endian uint64 pairs: order-preserving."""
    if len(hashes) % KEY_HASH_SIZE:
        raise ValueError("key hash bytes are not a multiple of 16")
    pairs = np.frombuffer(hashes, dtype=">u8").reshape(-1, 2)
    return pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.uint64)


def _group_starts(h: U64, low: U64) -> tuple[I64, Mask]:
    """A stable order grouping equal keys (in offset order within a group) and, along that
    order, which positions start a new key. Memory: 8 B (order) + 1 B (flags) per record,
    plus transients freed before returning; the rare high-word collision between different
    keys falls back to an exact lexicographic sort."""
    order: I64 = np.argsort(h, kind="stable")
    sh = h[order]
    new_key = np.empty(len(h), dtype=np.bool_)
    new_key[0] = True
    np.not_equal(sh[1:], sh[:-1], out=new_key[1:])
    del sh
    same = np.flatnonzero(~new_key)  # positions whose high word equals the previous one
    if len(same) and np.any(low[order[same]] != low[order[same - 1]]):
        order = np.lexsort((np.arange(len(h)), low, h))
        sh, sl = h[order], low[order]
        np.not_equal(sh[1:], sh[:-1], out=new_key[1:])
        new_key[1:] |= sl[1:] != sl[:-1]
    return order, new_key


def _member(qh: U64, ql: U64, mh: U64, ml: U64) -> Mask:
    """Which query keys are in the map (mh, ml sorted lexicographically)."""
    if len(mh) == 0 or len(qh) == 0:
        return np.zeros(len(qh), dtype=np.bool_)
    idx = np.searchsorted(mh, qh, side="left")
    idx_c = np.minimum(idx, len(mh) - 1)
    hit = (mh[idx_c] == qh) & (ml[idx_c] == ql)
    if np.any(mh[1:] == mh[:-1]):  # rare high-word collisions: check the whole run exactly
        known = set(zip(mh.tolist(), ml.tolist(), strict=True))
        hit = np.fromiter(((h, lo) in known for h, lo in zip(qh.tolist(), ql.tolist(),
                                                               strict=True)),
                          dtype=np.bool_, count=len(qh))
    out: Mask = hit
    return out


def dedupe(hi: U64, lo: U64, cleanable: int, capacity: int, dirty_start: int = 0) -> DedupeResult:
    """Keep-mask for records [0, n) in offset order.

    Like Kafka's cleaner: the offset map is built from the dirty records [dirty_start,
    cleanable) (those below the first uncleanable offset, after the cleaner checkpoint),
    holding at most `capacity` distinct keys; when it is full the map ends early and
    everything from there on is kept as it is. Inside the map's range only the latest record
    per key stays; an already-clean record (before `dirty_start`) goes if the map holds a
    newer record of its key. A record that is the latest for its key is never dropped.
    """
    n = len(hi)
    dirty_start = min(max(dirty_start, 0), n)
    cleanable = max(min(cleanable, n), dirty_start)
    if dirty_start == 0:
        return _dedupe_dirty(hi, lo, cleanable, capacity)
    sub = _dedupe_dirty(hi[dirty_start:], lo[dirty_start:], cleanable - dirty_start, capacity)
    keep = np.ones(n, dtype=np.bool_)
    keep[dirty_start:] = sub.keep
    end = dirty_start + sub.map_end
    # The map: distinct keys of [dirty_start, end), sorted; clean records with a key in it go.
    mh, ml = hi[dirty_start:end], lo[dirty_start:end]
    order = np.lexsort((ml, mh))
    mh, ml = mh[order], ml[order]
    if len(mh):
        first = np.empty(len(mh), dtype=np.bool_)
        first[0] = True
        first[1:] = (mh[1:] != mh[:-1]) | (ml[1:] != ml[:-1])
        mh, ml = mh[first], ml[first]
        nonnull = (mh != 0) | (ml != 0)
        mh, ml = mh[nonnull], ml[nonnull]
    keep[:dirty_start] = ~_member(hi[:dirty_start], lo[:dirty_start], mh, ml)
    return DedupeResult(keep, end, sub.distinct_keys, sub.null_keys)


def _dedupe_dirty(hi: U64, lo: U64, cleanable: int, capacity: int) -> DedupeResult:
    """`dedupe` with the map starting at record 0."""
    n = len(hi)
    keep = np.ones(n, dtype=np.bool_)
    cleanable = min(cleanable, n)
    if cleanable <= 1:
        return DedupeResult(keep, cleanable, cleanable, 0)
    h, low = hi[:cleanable], lo[:cleanable]
    null = (h == 0) & (low == 0)  # null keys are never map entries nor deduplicated
    nulls = int(np.count_nonzero(null))
    order, new_key = _group_starts(h, low)
    total_distinct = int(np.count_nonzero(new_key)) - (1 if nulls else 0)
    if total_distinct > capacity:
        # Like Kafka stopping when the map is full: the longest prefix (in offset order)
        # whose distinct keys fit; records from there on are kept as they are.
        first_at = np.zeros(cleanable, dtype=np.bool_)
        first_at[order[new_key]] = True
        first_at &= ~null
        map_end = int(np.searchsorted(np.cumsum(first_at), capacity, side="right"))
        del order, new_key, first_at
        sub = _dedupe_dirty(hi[:map_end], lo[:map_end], map_end, capacity)
        keep[:map_end] = sub.keep
        return DedupeResult(keep, map_end, sub.distinct_keys, sub.null_keys)
    # The last record of each key group is the latest (groups are in offset order).
    last_in_group = np.empty(cleanable, dtype=np.bool_)
    last_in_group[:-1] = new_key[1:]
    last_in_group[-1] = True
    del new_key
    keep[:cleanable] = False
    keep[order[last_in_group]] = True
    if nulls:
        keep[:cleanable] |= null
    return DedupeResult(keep, cleanable, total_distinct, nulls)
