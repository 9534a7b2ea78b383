"""Random workloads against a model of everything produced.

Several topics (compact and delete policies), keys from a small key space, tombstones,
headers; rounds of produce, each followed or not by `run_once(everything=True)` or by a
planner-driven `run_once()`, with a fake clock. After every round, for every partition:
offsets and records are preserved (the log is a subsequence of what was produced), the
latest record of every key is there, no older record resurfaces; after a whole-log clean
exactly one record per key survives; tombstones follow Kafka's delete horizon: kept until
delete.retention.ms after the first whole-log clean that retained them, dropped by a later
whole-log clean after that; delete-policy topics keep every record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor import merge
from tests.compactor.support import (
    TP,
    Harness,
    Row,
    assert_compacted_invariants,
    latest_per_key,
)

# topic -> (partitions, configs)
TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    "c1": (1, {"cleanup.policy": "compact", "delete.retention.ms": "1000"}),
    "c2": (2, {"cleanup.policy": "compact", "delete.retention.ms": "5000"}),
    "d": (2, {}),
}
RETENTION = {"c1": 1000, "c2": 5000}


@dataclass
class TombstoneModel:
    """What we know about when a tombstone was first retained by a whole-log clean."""

    t0_min: int | None = None  # earliest possible first-retain time (a run saw it)
    t0_max: int | None = None  # a whole-log clean certainly retained it by then
    dropped: bool = False  # observed gone (for good)


@dataclass
class Checker:
    h: Harness
    tombs: dict[tuple[str, int, int], TombstoneModel] = field(default_factory=dict)
    whole_log_cleans: int = 0

    def setup(self) -> None:
        for name, (parts, configs) in TOPICS.items():
            self.h.md.create_topic(name, parts, configs)

    def partitions(self) -> list[TP]:
        return [(t, p) for t, (n, _) in TOPICS.items() for p in range(n)]

    def round(self, rows: list[Row], action: str, advance: int) -> None:
        if rows:
            self.h.produce(rows)
        self.h.clock.advance(advance)
        now = self.h.clock.now_ms()
        committed = False
        if action in ("all", "plan"):
            reports = self.h.compactor().run_once(everything=action == "all")
            assert all(r.outcome == "committed" for r in reports), [r.error for r in reports]
            committed = bool(reports)
        for tp in self.partitions():
            self.check(tp, action if committed else "none", now)

    def check(self, tp: TP, action: str, now: int) -> None:
        topic, part = tp
        produced = self.h.produced.get(tp, [])
        got = self.h.read(topic, part)
        if topic not in RETENTION:
            assert got == produced, f"{tp}: delete-policy data changed"
            return
        assert_compacted_invariants(got, produced)
        latest = latest_per_key(produced)
        present = {r.offset for r in got}
        retention = RETENTION[topic]
        for rec in latest.values():
            if rec.value is not None:
                continue
            m = self.tombs.setdefault((topic, part, rec.offset), TombstoneModel())
            if m.dropped:
                assert rec.offset not in present, f"{tp}: tombstone {rec} came back"
                continue
            if rec.offset not in present:
                m.dropped = True
                assert action != "none", f"{tp}: tombstone {rec} vanished without a clean"
                assert m.t0_min is not None and m.t0_min + retention <= now, (
                    f"{tp}: tombstone {rec} dropped before its horizon ({m}, now {now})")
                continue
            if action == "all":
                assert m.t0_max is None or m.t0_max + retention > now, (
                    f"{tp}: tombstone {rec} outlived its horizon ({m}, now {now})")
                if m.t0_max is None:
                    m.t0_max = now
            if action != "none" and m.t0_min is None:
                m.t0_min = now
        if action == "all":
            # One record per key: the latest (a tombstone only until its horizon).
            want = sorted((r for r in latest.values() if r.offset in present),
                          key=lambda r: r.offset)
            assert got == want, f"{tp}: not fully compacted"
            assert all(r.value is None for r in latest.values() if r.offset not in present)


KEYS = [b"k%d" % i for i in range(5)]

row_st = st.tuples(
    st.sampled_from(sorted(TOPICS)),
    st.integers(0, 1),
    st.integers(0, len(KEYS) - 1),
    st.sampled_from(["value", "tombstone", "headers"]),
    st.binary(max_size=4),
)
round_st = st.tuples(
    st.lists(row_st, max_size=25),
    st.sampled_from(["all", "plan", "none"]),
    st.sampled_from([0, 1, 500, 999, 1000, 4000, 5000, 31_000]),
)


def to_rows(raw: list[tuple[str, int, int, str, bytes]]) -> list[Row]:
    rows: list[Row] = []
    for topic, part, k, kind, payload in raw:
        part %= TOPICS[topic][0]
        key: bytes | None = KEYS[k]
        if topic == "d" and k == 0:
            key = None  # null keys are fine on delete-policy topics
        value = None if kind == "tombstone" else b"v" + payload
        headers = (("h", payload), ("n", None)) if kind == "headers" else ()
        rows.append((topic, part, key, value, headers))
    return rows


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(round_st, min_size=1, max_size=6))
def test_random_workloads_against_the_model(
    tmp_path_factory: pytest.TempPathFactory,
    rounds: list[tuple[list[tuple[str, int, int, str, bytes]], str, int]],
) -> None:
    tmp = tmp_path_factory.mktemp("model")
    h = Harness.open(f"sqlite:///{tmp}/md.db")
    try:
        c = Checker(h)
        c.setup()
        for raw, action, advance in rounds:
            c.round(to_rows(raw), action, advance)
    finally:
        h.close()


def fixed_rounds() -> list[tuple[list[Row], str, int]]:
    """A scenario touching every rule: duplicates, tombstones before/after their horizon,
    planner-driven L0 merges, whole-log cleans, delete-policy data, headers, null keys."""
    def rows(spec: str) -> list[Row]:
        out: list[Row] = []
        for item in spec.split():
            topic, part, key, value = item.split(":")
            out.append((topic, int(part), None if key == "-" else key.encode(),
                        None if value == "-" else value.encode(),
                        (("h", value.encode()),) if value.startswith("h") else ()))
        return out

    return [
        (rows("c1:0:a:1 c1:0:b:1 c1:0:a:2 c2:0:a:1 c2:1:x:h1 d:0:-:e1 d:1:k:e2"), "none", 0),
        (rows("c1:0:a:3 c1:0:b:- c2:0:a:- c2:1:x:h2 d:0:k:e3"), "all", 10),
        (rows("c1:0:c:1 c2:1:y:1 d:1:-:-"), "plan", 31_000),
        (rows("c1:0:c:2 c2:0:b:1"), "all", 999),
        (rows("c1:0:b:2 c2:0:b:-"), "all", 1000),
        (rows("c2:1:x:- d:0:k:e4"), "plan", 31_000),
        ([], "all", 5000),
        (rows("c1:0:d:- c2:0:a:again"), "all", 1),
        ([], "all", 5000),
    ]


def test_fixed_scenario_on_postgres(postgres_url: str) -> None:
    h = Harness.open(postgres_url)
    try:
        c = Checker(h)
        c.setup()
        for rows, action, advance in fixed_rounds():
            c.round(rows, action, advance)
        # The scenario ends fully compacted, with every expired tombstone gone.
        assert h.kv("c1", 0) == [(3, b"a", b"3"), (6, b"c", b"2"), (7, b"b", b"2")]
        assert [(k, v) for _, k, v in h.kv("c2", 0)] == [(b"a", b"again")]
        assert h.read("d", 0) == h.produced[("d", 0)]
    finally:
        h.close()


@pytest.mark.parametrize("run_bytes", [merge.RUN_BYTES, 1])
def test_fixed_scenario_on_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  run_bytes: int) -> None:
    # run_bytes=1: pass 2 appends every output batch in a run of its own.
    monkeypatch.setattr(merge, "RUN_BYTES", run_bytes)
    h = Harness.open(f"sqlite:///{tmp_path}/md.db")
    try:
        c = Checker(h)
        c.setup()
        for rows, action, advance in fixed_rounds():
            c.round(rows, action, advance)
        assert h.kv("c1", 0) == [(3, b"a", b"3"), (6, b"c", b"2"), (7, b"b", b"2")]
    finally:
        h.close()
