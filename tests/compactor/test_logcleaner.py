"""Ports of Kafka's LogCleanerTest scenarios that apply to siltstream (see
/work/shared/reference): duplicates, tombstones and delete.retention.ms, partial cleans with
a full offset map, offset gaps, min.compaction.lag.ms, cleanup.policy=compact,delete."""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

import compactor.offsetmap
from planner.model import JobSpec, PartitionPlan, Trigger
from tests.compactor.support import (
    Harness,
    Rec,
    assert_compacted_invariants,
    assert_preserved,
    latest_per_key,
)

COMPACT = {"cleanup.policy": "compact"}


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness.open(f"sqlite:///{tmp_path}/md.db")
    yield harness
    harness.close()


def by_offset(recs: dict[bytes | None, Rec]) -> list[Rec]:
    return sorted(recs.values(), key=lambda r: r.offset)


# ------------------------------------------------------------------ testCleanSegments


def test_clean_with_duplicates_keeps_latest_per_key(h: Harness) -> None:
    h.md.create_topic("t", 1, COMPACT)
    for rnd in range(3):  # three input files, keys repeating within and across them
        h.produce([("t", 0, b"k%d" % (i % 7), b"v%d-%d" % (rnd, i),
                    (("n", b"%d" % i),) if i % 4 == 0 else ()) for i in range(20)])
    (report,) = h.compactor().run_once(everything=True)
    assert report.outcome == "committed"
    produced = h.produced[("t", 0)]
    want = by_offset(latest_per_key(produced))
    got = h.read("t", 0)
    assert got == want  # exactly one record per key: the latest, with its headers/timestamp
    assert report.stats["records_in"] == 60 and report.stats["records_out"] == 7
    assert report.stats["duplicates_dropped"] == 53
    # A clean log is left alone: nothing to do, nothing changes.
    assert h.compactor().run_once(everything=True) == []
    assert h.read("t", 0) == want
    # New duplicates of old keys: the old values go, the new ones stay.
    h.produce([("t", 0, b"k1", b"newer", ()), ("t", 0, b"k9", b"fresh", ())])
    h.compactor().run_once(everything=True)
    assert h.read("t", 0) == by_offset(latest_per_key(h.produced[("t", 0)]))
    assert h.kv("t", 0)[-2:] == [(60, b"k1", b"newer"), (61, b"k9", b"fresh")]


def test_duplicates_inside_one_batch_are_reencoded_with_original_offsets(h: Harness) -> None:
    h.md.create_topic("t", 1, COMPACT)
    h.produce_kv("t", [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2")])
    (report,) = h.compactor().run_once(everything=True)
    assert h.kv("t", 0) == [(2, b"a", b"2"), (3, b"c", b"1"), (4, b"b", b"2")]
    assert report.stats["batches_reencoded"] >= 1


# ------------------------------------------------------------------ tombstones


def test_tombstones_retained_for_delete_retention_after_first_clean(h: Harness) -> None:
    h.md.create_topic("t", 1, {**COMPACT, "delete.retention.ms": "1000"})
    h.produce_kv("t", [(b"a", b"1"), (b"b", b"1"), (b"a", None)])
    # Long before the first clean: the horizon starts at the first clean, not production.
    h.clock.advance(50_000)
    comp = h.compactor()
    comp.run_once(everything=True)
    assert h.kv("t", 0) == [(1, b"b", b"1"), (2, b"a", None)]
    h.clock.advance(999)
    h.produce_kv("t", [(b"c", b"1")])
    (report,) = comp.run_once(everything=True)
    assert report.stats["tombstones_dropped"] == 0
    assert h.kv("t", 0) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    h.clock.advance(1)  # exactly delete.retention.ms after the first clean
    h.produce_kv("t", [(b"d", b"1")])
    (report,) = comp.run_once(everything=True)
    assert report.stats["tombstones_dropped"] == 1
    assert h.kv("t", 0) == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"d", b"1")]
    # The key is gone for good: no older value resurfaces after further cleans.
    h.clock.advance(10_000)
    comp.run_once(everything=True)
    assert all(r.key != b"a" for r in h.read("t", 0))


def test_tombstone_of_a_key_rewritten_later_goes_with_the_other_duplicates(h: Harness) -> None:
    h.md.create_topic("t", 1, {**COMPACT, "delete.retention.ms": "86400000"})
    h.produce_kv("t", [(b"a", b"1"), (b"a", None), (b"a", b"2")])
    h.compactor().run_once(everything=True)
    assert h.kv("t", 0) == [(2, b"a", b"2")]


def test_tombstone_kept_by_a_job_not_holding_the_whole_log(h: Harness) -> None:
    h.md.create_topic("t", 1, {**COMPACT, "delete.retention.ms": "0"})
    h.produce_kv("t", [(b"a", b"1")])
    h.compactor().run_once(everything=True)  # an L1 file holding a=1
    h.produce_kv("t", [(b"a", None)])
    h.produce_kv("t", [(b"b", b"1")])
    comp = h.compactor()
    newest = tuple(sorted(f.id for f in h.md.snapshot().files if f.level == 0))
    assert len(newest) == 2
    partial = JobSpec("partial", newest, 1, Trigger.FORCED_ALL, "test", 0,
                      (PartitionPlan("t", 0, False, 2**63 - 1, 0),))
    h.clock.advance(10_000)
    report = comp.run_job(partial)
    assert report.outcome == "committed", report.error
    # Dropping the tombstone here would resurrect a=1 from the file outside the job.
    assert h.kv("t", 0) == [(0, b"a", b"1"), (1, b"a", None), (2, b"b", b"1")]
    # The whole-log clean then removes a=1; the tombstone lives until its horizon.
    comp.run_once(everything=True)
    assert h.kv("t", 0) == [(1, b"a", None), (2, b"b", b"1")]
    h.clock.advance(1)
    comp.run_once(everything=True)
    assert h.kv("t", 0) == [(2, b"b", b"1")]


# ------------------------------------------------------------------ partial cleans


def kafka_passes(keys: list[bytes], capacity: int) -> Iterator[list[int]]:
    """Kafka's cleaner, pass after pass: the offset map is filled from the checkpoint in
    offset order until it holds `capacity` keys; a record before the map's end goes iff the
    map holds a newer offset of its key; the checkpoint moves to the map's end."""
    alive = list(range(len(keys)))
    checkpoint = 0
    while True:
        omap: dict[bytes, int] = {}
        end = len(keys)
        for o in alive:
            if o < checkpoint:
                continue
            if keys[o] not in omap and len(omap) >= capacity:
                end = o
                break
            omap[keys[o]] = o
        alive = [o for o in alive if o >= end or omap.get(keys[o], o) == o]
        yield list(alive)
        if end == len(keys):
            return
        checkpoint = end


@pytest.mark.parametrize("capacity", [1, 5, 10])
def test_partial_clean_with_a_tiny_map(h: Harness, capacity: int) -> None:
    check_partial_cleans(h, capacity)


def test_partial_clean_reading_hashes_in_tiny_blocks_through_a_spill_file(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass 1's block edges (the dirty window cut inside a block, the map filling mid-block)
    and hashes spooled to a temp file for pass 2 give the same cleans."""
    # (compactor.dedupe is also the name of the function the package exports)
    monkeypatch.setattr(importlib.import_module("compactor.dedupe"), "READ_BLOCK", 7)
    monkeypatch.setattr(compactor.offsetmap, "SPOOL_MEMORY", 0)
    check_partial_cleans(h, 5)


def check_partial_cleans(h: Harness, capacity: int) -> None:
    """Three input files, 40 keys, cleaned pass after pass as Kafka would."""
    h.md.create_topic("t", 1, COMPACT)
    rng = random.Random(capacity)
    keys = [b"k%d" % rng.randrange(40) for _ in range(300)]
    for start in range(0, 300, 100):  # three input files
        chunk = keys[start:start + 100]
        h.produce_kv("t", [(k, b"v%d" % (start + i)) for i, k in enumerate(chunk)])
    produced = h.produced[("t", 0)]
    latest = set(latest_per_key(produced).values())
    passes = list(kafka_passes(keys, capacity))
    assert len(passes) > 1  # the scenario really is a partial clean
    for n, want in enumerate(passes):
        reports = h.compactor(memory_budget=24 * capacity).run_once(everything=True)
        assert len(reports) == 1 and reports[0].outcome == "committed"
        if n < len(passes) - 1:
            assert reports[0].stats["partial_cleans"] == 1
        got = h.read("t", 0)
        assert_compacted_invariants(got, produced)
        assert latest <= set(got)  # never drops the latest record of a key
        assert [r.offset for r in got] == want, f"pass {n}"
    # Converged: one record per key; nothing more to do.
    assert set(h.read("t", 0)) == latest
    assert h.compactor(memory_budget=24 * capacity).run_once(everything=True) == []


def test_records_past_the_map_end_are_kept_as_they_are(h: Harness) -> None:
    h.md.create_topic("t", 1, COMPACT)
    # a, b fill a 2-key map; from c on (offset 3) everything stays, duplicates included.
    h.produce_kv("t", [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"c", b"2"),
                       (b"a", b"3"), (b"b", b"2")])
    (report,) = h.compactor(memory_budget=48).run_once(everything=True)
    assert report.stats["partial_cleans"] == 1
    assert [o for o, _, _ in h.kv("t", 0)] == [1, 2, 3, 4, 5, 6]


# ------------------------------------------------------------------ offsets


def test_offset_gaps_preserved_across_repeated_cleans(h: Harness) -> None:
    h.md.create_topic("t", 1, COMPACT)
    h.produce_kv("t", [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"b", b"1")])
    h.produce_kv("t", [(b"c", b"1"), (b"b", b"2"), (b"c", b"2"), (b"d", b"1")])
    want = [(2, b"a", b"3"), (5, b"b", b"2"), (6, b"c", b"2"), (7, b"d", b"1")]
    for _ in range(3):
        h.compactor().run_once(everything=True)
        assert h.kv("t", 0) == want
        (part,) = h.md.partitions("t")
        assert (part.log_start_offset, part.next_offset) == (0, 8)
    # Reading from inside a gap returns the next record; past the end returns nothing.
    assert h.kv("t", 0, start=0) == want
    assert h.kv("t", 0, start=1) == want
    assert h.kv("t", 0, start=3) == want[1:]
    assert h.kv("t", 0, start=4) == want[1:]
    assert h.kv("t", 0, start=7) == want[3:]
    assert h.kv("t", 0, start=8) == []
    # New records continue after the old end, never inside a gap.
    h.produce_kv("t", [(b"e", b"1")])
    assert h.kv("t", 0, start=3)[-1] == (8, b"e", b"1")
    h.compactor().run_once(everything=True)
    assert h.kv("t", 0) == [*want, (8, b"e", b"1")]


def test_clean_beyond_missing_offsets_across_files(h: Harness) -> None:
    """A key whose only other occurrence sits behind a gap left by an earlier clean."""
    h.md.create_topic("t", 1, COMPACT)
    h.produce_kv("t", [(b"x", b"%d" % i) for i in range(10)])
    h.compactor().run_once(everything=True)
    h.produce_kv("t", [(b"y", b"1"), (b"x", b"last")])
    h.compactor().run_once(everything=True)
    assert h.kv("t", 0) == [(10, b"y", b"1"), (11, b"x", b"last")]


# ------------------------------------------------------------------ min.compaction.lag.ms


def test_min_compaction_lag_keeps_recent_records_uncleaned(h: Harness) -> None:
    h.md.create_topic("t", 1, {**COMPACT, "min.compaction.lag.ms": "60000"})
    h.produce_kv("t", [(b"a", b"1"), (b"a", b"2"), (b"b", b"1")])  # file 1
    h.clock.advance(120_000)
    h.produce_kv("t", [(b"a", b"3"), (b"b", b"2"), (b"b", b"3")])  # file 2: too young
    h.compactor().run_once(everything=True)
    # The map covers the cleanable file only: a=1 goes (a=2 is newer there); a=2 and b=1
    # stay (their newer values are uncleanable) and the young records are untouched.
    assert h.kv("t", 0) == [(1, b"a", b"2"), (2, b"b", b"1"), (3, b"a", b"3"),
                            (4, b"b", b"2"), (5, b"b", b"3")]
    h.clock.advance(59_999)
    h.compactor().run_once(everything=True)
    assert len(h.kv("t", 0)) == 5  # still younger than the lag
    h.clock.advance(1)
    h.compactor().run_once(everything=True)
    assert h.kv("t", 0) == [(3, b"a", b"3"), (5, b"b", b"3")]


def test_min_compaction_lag_with_old_record_timestamps(h: Harness) -> None:
    """Lag is judged by record timestamps (Kafka: the segment's largest timestamp)."""
    h.md.create_topic("t", 1, {**COMPACT, "min.compaction.lag.ms": "60000"})
    comp = h.compactor()
    h.produce_kv("t", [(b"a", b"1"), (b"a", b"2")])
    comp.run_once(everything=True)
    assert h.kv("t", 0) == [(0, b"a", b"1"), (1, b"a", b"2")]
    h.clock.advance(60_000)
    comp.run_once(everything=True)
    assert h.kv("t", 0) == [(1, b"a", b"2")]


# ------------------------------------------------------------------ compact,delete


def test_compact_delete_policy_is_compacted_and_delete_policy_untouched(h: Harness) -> None:
    h.md.create_topic("e", 2)
    h.md.create_topic("c", 2, {"cleanup.policy": "compact,delete"})
    for _ in range(2):
        h.produce([(t, i % 2, b"same%d" % (i % 3), b"%d" % i, ())
                   for t in ("e", "c") for i in range(30)])
    (report,) = h.compactor().run_once(everything=True)
    assert report.outcome == "committed"
    for p in range(2):
        assert h.read("e", p) == h.produced[("e", p)]
        got = h.read("c", p)
        assert_preserved(got, h.produced[("c", p)])
        assert got == by_offset(latest_per_key(h.produced[("c", p)]))
    files = h.md.snapshot().files
    # Compacted and delete-policy data never share an output file.
    assert len(files) == 2 and {f.holds_compacted for f in files} == {True, False}
    assert all(f.level == 1 for f in files)
