"""The compiled offset map against a dict, its growth within the budget, and the spool."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.dedupe import MAP_BYTES_PER_KEY, map_capacity
from compactor.offsetmap import HashSpool, OffsetMap
from fileformat import NULL_KEY_HASH


def keys(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.bytes(16) for _ in range(n)]


def same_home(n: int, word: bytes) -> list[bytes]:
    """Keys sharing their first 8 bytes: one home slot, a long probe run (from the last
    slot, it wraps around to the first)."""
    return [word * 8 + i.to_bytes(8, "big") for i in range(1, n + 1)]


@settings(max_examples=200, deadline=None)
@given(
    picks=st.lists(st.integers(0, 40), max_size=400),
    capacity=st.integers(1, 45),
    clash=st.sampled_from([b"", b"\x07", b"\xff"]),
)
def test_insert_and_survivors_match_a_dict(picks: list[int], capacity: int, clash: bytes) -> None:
    pool = same_home(40, clash) if clash else keys(40, 3)
    pool.append(NULL_KEY_HASH)  # index 40: the null key
    hashes = b"".join(pool[p] for p in picks)
    m = OffsetMap(capacity)
    consumed, nulls = m.insert(hashes, 5)
    # The reference: the latest position per key until a new key finds the map full.
    ref: dict[bytes, int] = {}
    want_consumed, want_nulls = len(picks), 0
    for i, p in enumerate(picks):
        k = pool[p]
        if k == NULL_KEY_HASH:
            want_nulls += 1
            continue
        if k not in ref and len(ref) >= capacity:
            want_consumed = i
            break
        ref[k] = 5 + i
    assert (consumed, nulls) == (want_consumed, want_nulls)
    assert len(m) == len(ref)
    for k in pool:
        assert m.get(k) == ref.get(k)
    end = 5 + consumed
    out = np.empty(len(picks), dtype=np.bool_)
    kept = m.survivors(hashes, 5, end, out.data)
    want = [not (5 + i < end and pool[p] in ref and ref[pool[p]] > 5 + i)
            for i, p in enumerate(picks)]
    assert out.tolist() == want and kept == sum(want)


@pytest.mark.parametrize("capacity", [3_000, 30_000])
def test_a_growing_map_matches_a_dict(capacity: int) -> None:
    """Many keys through every growth step (and past capacity), in uneven blocks."""
    rng = np.random.default_rng(capacity)
    pool = keys(20_000, 1)
    picks = rng.integers(0, len(pool), size=100_000)
    hashes = b"".join(pool[p] for p in picks)
    m = OffsetMap(capacity)
    pos = 0
    for size in rng.integers(1, 5_000, size=1_000):
        block = hashes[16 * pos : 16 * (pos + int(size))]
        consumed, _ = m.insert(block, pos)
        pos += consumed
        if consumed < len(block) // 16 or pos == len(picks):
            break
    ref: dict[bytes, int] = {}
    for i, p in enumerate(picks[:pos]):
        ref[pool[p]] = i
    assert len(m) == len(ref) <= capacity
    assert pos == len(picks) or (len(ref) == capacity and pool[picks[pos]] not in ref)
    assert all(m.get(k) == ref.get(k) for k in pool)
    out = np.empty(len(picks), dtype=np.bool_)
    m.survivors(hashes, 0, pos, out.data)
    want = [i >= pos or ref[pool[p]] == i for i, p in enumerate(picks)]
    assert out.tolist() == want


def test_grows_from_small_to_the_budget_and_no_further() -> None:
    budget = 4 << 20
    capacity = map_capacity(budget)
    m = OffsetMap(capacity)
    sizes = [m.nbytes]
    block = os.urandom(16 * 4096)
    pos = 0
    while len(m) < capacity:
        hashes = os.urandom(16 * 64)
        consumed, _ = m.insert(hashes, pos)
        pos += consumed
        if sizes[-1] != m.nbytes:
            sizes.append(m.nbytes)
        if consumed < 64:
            break
    assert len(m) == capacity and sizes[0] < 64 * 1024  # started small
    assert sizes == sorted(sizes) and len(sizes) > 3  # grew step by step
    # old + new table during the last growth stay within the budget
    assert sizes[-1] + sizes[-2] <= budget
    assert m.nbytes / len(m) <= MAP_BYTES_PER_KEY
    # full: a new key stops the insert, known keys still update
    assert m.insert(block[:16], pos) == (0, 0)
    known = hashes[:16]
    assert m.insert(known, pos + 1) == (1, 0) and m.get(known) == pos + 1


def test_five_million_keys_fit_the_default_budget() -> None:
    """The issue's figure: 5 M distinct keys in 128 MiB (the table is then sized for the
    5.59 M keys the budget admits: 24.9 B per key held, 22.2 B when full)."""
    capacity = map_capacity(128 << 20)
    assert capacity >= 5_000_000
    m = OffsetMap(capacity)
    rng = np.random.default_rng(5)
    for start in range(0, 5_000_000, 1 << 18):
        n = min(1 << 18, 5_000_000 - start)
        assert m.insert(rng.bytes(16 * n), start) == (n, 0)
    assert len(m) == 5_000_000 and m.nbytes <= 128 << 20


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="capacity"):
        OffsetMap(0)
    m = OffsetMap(10)
    with pytest.raises(ValueError, match="multiple of 16"):
        m.insert(b"x" * 15, 0)
    with pytest.raises(OverflowError):
        m.insert(b"x" * 16, 2**32)
    with pytest.raises(ValueError, match="one byte per hash"):
        m.survivors(b"x" * 32, 0, 2, bytearray(1))
    assert m.get(NULL_KEY_HASH) is None


@pytest.mark.parametrize("limit", [0, 40, 1 << 20])
def test_spool_reads_back_what_was_written(limit: int) -> None:
    data = [os.urandom(n) for n in (16, 0, 48, 160, 32)]
    with HashSpool(limit) as spool:
        for d in data:
            spool.write(d)
        assert spool.spilled == (sum(map(len, data)) > limit)
        assert spool.size == sum(map(len, data))
        assert b"".join(spool.read(n) for n in (32, 64, 160)) == b"".join(data)
        with pytest.raises(RuntimeError, match="bytes left"):
            spool.read(16)
        with pytest.raises(RuntimeError, match="being read"):
            spool.write(b"x")


def test_compiled_map_is_built_with_the_current_abi() -> None:
    import compactor.offsetmap as wrapper
    from compactor import _offsetmap

    assert _offsetmap.ABI == wrapper.ABI
