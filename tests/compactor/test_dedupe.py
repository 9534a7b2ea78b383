"""Both passes (compiled offset map) against a plain-Python model of Kafka's offset map."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.dedupe import _Bytes, dedupe, pass1
from compactor.offsetmap import HashSpool
from fileformat import NULL_KEY_HASH, KeyHasher

HASHER = KeyHasher(b"s" * 32)


def model(keys: list[bytes | None], cleanable: int, capacity: int,
          dirty: int = 0) -> tuple[list[bool], int]:
    """Kafka: fill the map from the dirty start in offset order until it holds `capacity`
    keys; keep the latest; clean records go if the map has a newer record of their key."""
    seen: dict[bytes, int] = {}
    end = dirty
    for i in range(dirty, max(cleanable, dirty)):
        k = keys[i]
        if k is not None and k not in seen and len(seen) >= capacity:
            break
        if k is not None:
            seen[k] = i
        end = i + 1
    keep = [True] * len(keys)
    for i, k in enumerate(keys[:end]):
        if k is not None and k in seen and seen[k] != i:
            keep[i] = False
    return keep, end


def run(keys: list[bytes | None], cleanable: int, capacity: int,
        dirty: int = 0) -> tuple[list[bool], int]:
    hashes = b"".join(HASHER.hash(k) for k in keys)
    res = dedupe(hashes, cleanable, capacity, dirty)
    return [bool(x) for x in res.keep], res.map_end


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"]),
                            st.binary(max_size=3)), max_size=60),
    cut=st.integers(0, 70),
    capacity=st.integers(1, 8),
    dirty=st.integers(0, 70),
)
def test_dedupe_matches_kafka_model(keys: list[bytes | None], cut: int, capacity: int,
                                    dirty: int) -> None:
    cleanable = min(cut, len(keys))
    dirty = min(dirty, cleanable)
    got_keep, got_end = run(keys, cleanable, capacity, dirty)
    want_keep, want_end = model(keys, cleanable, capacity, dirty)
    assert got_keep == want_keep
    if cleanable - dirty > 1:
        assert got_end == want_end


def test_latest_per_key_survives() -> None:
    keys: list[bytes | None] = [b"k1", b"k2", b"k1", b"k1", b"k3", b"k2"]
    keep, end = run(keys, len(keys), 100)
    assert keep == [False, False, False, True, True, True] and end == 6


def test_partial_clean_when_map_is_full() -> None:
    keys: list[bytes | None] = [b"a", b"b", b"a", b"c", b"a", b"b"]
    keep, end = run(keys, len(keys), 2)
    # The map holds a, b; it is full when c arrives: offsets 3.. are kept as they are.
    assert end == 3
    assert keep == [False, True, True, True, True, True]


def test_same_home_slot_keys_stay_apart() -> None:
    """Hashes sharing their first 8 bytes (the map's home slot) are different keys."""
    a, b = bytes(8) + b"\x00" * 7 + b"\x01", bytes(8) + b"\x00" * 7 + b"\x02"
    res = dedupe(a + b + a, 3, 10)
    assert list(res.keep) == [False, True, True] and res.distinct_keys == 2


def test_null_keys_are_kept_and_not_in_the_map() -> None:
    """The null key's hash is all zero (the map's empty slot): never an entry, always kept."""
    assert bytes(16) == NULL_KEY_HASH
    k = HASHER.hash(b"k")
    res = dedupe(NULL_KEY_HASH + k + NULL_KEY_HASH + k, 4, 1)
    assert list(res.keep) == [True, False, True, True]
    assert (res.distinct_keys, res.null_keys, res.map_end) == (1, 2, 4)


def test_map_is_sized_by_the_window_not_the_budget() -> None:
    """A window of 100 records can hold at most 100 keys: the map's limit is 100, not the
    budget's 1 M (memory by the job's keys), and it still dedupes the whole window."""
    hashes = b"".join(HASHER.hash(b"k%d" % (i % 7)) for i in range(100))
    with HashSpool() as spool:
        p1 = pass1([_Bytes(hashes)], (0, 100), 1_000_000, spool)
        assert p1.map is not None and p1.map.capacity == 100
        assert p1.map_end == 100 and p1.distinct_keys == 7
