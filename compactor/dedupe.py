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


def dedupe(hi: U64, lo: U64, cleanable: int, capacity: int) -> DedupeResult:
    """Keep-mask for records [0, n): among the first `cleanable` records (those below the
    first uncleanable offset), keep only the latest record per key, building the map over at
    most `capacity` distinct keys; records past the map's end are kept as they are."""
    n = len(hi)
    keep = np.ones(n, dtype=np.bool_)
    cleanable = min(cleanable, n)
    if cleanable <= 1:
        return DedupeResult(keep, cleanable, cleanable, 0)
    h, low = hi[:cleanable], lo[:cleanable]
    # Stable argsort by high word, then fix up the (astronomically rare) runs where the high
    # words collide but the low words differ with a full lexicographic sort.
    order = np.argsort(h, kind="stable")
    sh = h[order]
    if np.any((sh[1:] == sh[:-1]) & (low[order][1:] != low[order][:-1])):
        order = np.lexsort((np.arange(cleanable), low, h))
    sh, sl = h[order], low[order]
    new_key = np.empty(cleanable, dtype=np.bool_)
    new_key[0] = True
    np.not_equal(sh[1:], sh[:-1], out=new_key[1:])
    new_key[1:] |= sl[1:] != sl[:-1]
    # First occurrence (in offset order) of each key -> cumulative distinct keys per prefix.
    first_at = np.zeros(cleanable, dtype=np.bool_)
    first_at[order[new_key]] = True
    null = (h == 0) & (low == 0)  # null keys are not map entries
    first_at &= ~null
    distinct_upto = np.cumsum(first_at)
    total_distinct = int(distinct_upto[-1])
    if total_distinct <= capacity:
        map_end = cleanable
    else:
        # The longest prefix whose distinct keys fit: like Kafka stopping when the map is full.
        map_end = int(np.searchsorted(distinct_upto, capacity, side="right"))
        sub = dedupe(hi[:map_end], lo[:map_end], map_end, capacity)
        keep[:map_end] = sub.keep
        return DedupeResult(keep, map_end, sub.distinct_keys, sub.null_keys)
    # The last record of each key group (group order is offset order: stable sort).
    last_in_group = np.empty(cleanable, dtype=np.bool_)
    last_in_group[:-1] = new_key[1:]
    last_in_group[-1] = True
    keep[:cleanable] = False
    keep[order[last_in_group]] = True
    # Null keys (all-zero hash) are never deduplicated.
    nulls = int(np.count_nonzero(null))
    if nulls:
        keep[:cleanable] |= null
    return DedupeResult(keep, map_end, total_distinct, nulls)
