"""The concurrency suite: several agent and compactor processes on one PostgreSQL metadata
store and one object store at once.

One trial, on a fresh PostgreSQL database: 2-3 agents each produce 40-120 records to a
delete-policy and a compacted topic (4 partitions each, a flush every 4-12 records) while
2-3 compactors run rounds of every job proposed. Afterwards:

- no offset was handed out twice (acks of all agents, and the live segments of each
  partition, never overlap);
- no file was an input of two committed jobs;
- no acknowledged record is lost or duplicated (faults/check.py, as in the crash suite), and
  a recovery compaction and GC leave Kafka's result and no orphan.
"""

from __future__ import annotations

import itertools
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from clock import ManualClock
from compactor import Compactor, CompactorConfig
from faults import procs
from faults.check import (
    CRASH_KINDS,
    TP,
    Ack,
    Tally,
    check_compacted,
    check_log,
    check_objects,
    read_acks,
    read_logs,
)
from harness import postgres
from metadata import MetadataStore
from objectstore import open_store

TOPICS = (("d", 4, 0), ("c", 4, 6))  # (name, partitions, keys): delete policy, compacted
PARTITIONS = [(t, p) for t, n, _ in TOPICS for p in range(n)]
KINDS = (*CRASH_KINDS, "overlapping", "compacted_twice")


def run(trials: int, seed: int, admin_url: str | None = None) -> dict[str, Any]:
    """Run `trials` trials, each on a new database of the server of `admin_url` (None:
    SILT_TEST_POSTGRES_URL's, or one started for the run); the figures (faults/chaos.py)."""
    if admin_url is None:
        with postgres.admin_url() as url:
            return run(trials, seed, url)
    rng = random.Random(seed)
    tally = Tally(KINDS)
    errors: list[str] = []
    totals: Counter[str] = Counter()
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="silt-chaos-concurrency-"))
    try:
        for i in range(trials):
            where = root / f"t{i}"
            where.mkdir()
            with postgres.fresh_database(admin_url, "silt_chaos") as md_url:
                trial(where, md_url, rng, tally, errors, totals)
            shutil.rmtree(where, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    return {
        "trials": trials,
        "agent processes": totals["agents"],
        "compactor processes": totals["compactors"],
        **{k: totals[k] for k in sorted(totals) if k.startswith("job rows")},
        **tally.outcome(errors, elapsed, trials),
    }


def trial(where: Path, md_url: str, rng: random.Random, tally: Tally, errors: list[str],
          totals: Counter[str]) -> None:
    """One trial (module docstring)."""
    store_url = f"file://{where}/store"
    md = MetadataStore.open(md_url, create=True)
    for name, partitions, keys in TOPICS:
        md.create_topic(name, partitions, {"cleanup.policy": "compact"} if keys else {})
    md.close()
    base = procs.Work("agent", store_url, md_url, where / "log", topics=TOPICS)
    agents = [replace(base, tag=f"a{j}:", acks=where / f"acks-{j}", log=where / f"agent{j}.log",
                      records=rng.randint(40, 120), flush_every=rng.randint(4, 12))
              for j in range(rng.randint(2, 3))]
    compactors = [replace(base, role="compactor", rounds=rng.randint(3, 6),
                          log=where / f"compactor{j}.log") for j in range(rng.randint(2, 3))]
    running = [(w, procs.start(w)) for w in [*agents, *compactors]]
    for w, proc in running:
        proc.join()
        if proc.exitcode != 0:
            last = w.log.read_text().splitlines()[0][:300] if w.log.exists() else ""
            errors.append(f"{w.log.stem} exit {proc.exitcode}: {last}")
    totals["agents"] += len(agents)
    totals["compactors"] += len(compactors)

    clock = ManualClock(int(time.time() * 1000) + 3_600_000)
    md = MetadataStore.open(md_url, clock=clock)
    try:
        store = open_store(store_url)
        acked: dict[TP, list[Ack]] = {}
        for w in agents:
            assert w.acks is not None
            for tp, acks in read_acks(w.acks).items():
                acked.setdefault(tp, []).extend(acks)
        everything = md.list_jobs()
        totals.update(f"job rows {job.state}" for job in everything)
        jobs = [job for job in everything if job.state == "committed"]
        inputs = Counter(fid for job in jobs for fid in job.input_file_ids)
        twice = [fid for fid, n in inputs.items() if n > 1]
        tally.note("compacted_twice", len(twice), f"files {twice[:5]} in two committed jobs")
        _check_overlaps(tally, md, acked)
        before = read_logs(store, md, PARTITIONS)
        tags = tuple(w.tag for w in agents)
        for tp in PARTITIONS:
            check_log(tally, tp, before[tp], sorted(acked.get(tp, [])), tags,
                      compacted=tp[0] == "c")
        config = CompactorConfig()
        recovery = Compactor(store, md, config, clock=clock)
        recovery.run_once(everything=True)
        clock.advance(config.grace_ms + 1)
        recovery.collect_garbage()
        after = read_logs(store, md, PARTITIONS)
        for tp in PARTITIONS:
            if tp[0] == "c":
                check_compacted(tally, tp, before[tp], after[tp])
            else:
                tally.note("compaction_mismatch", int(after[tp] != before[tp]),
                           f"{tp}: delete-policy log changed by compaction")
        check_objects(tally, store, md)
    finally:
        md.close()


def _check_overlaps(tally: Tally, md: MetadataStore, acked: dict[TP, list[Ack]]) -> None:
    """No offset acked twice; live segments of a partition never overlap."""
    for tp, acks in acked.items():
        offsets = Counter(offset for offset, _, _ in acks)
        twice = [o for o, n in offsets.items() if n > 1]
        tally.note("overlapping", len(twice), f"{tp}: offsets {twice[:5]} acked twice")
    spans: dict[TP, list[tuple[int, int]]] = {}
    for seg in md.audit_snapshot(segments=True).segments:
        spans.setdefault((seg.topic, seg.partition), []).append(
            (seg.base_offset, seg.last_offset))
    for tp, ranges in spans.items():
        ranges.sort()
        bad = sum(b[0] <= a[1] for a, b in itertools.pairwise(ranges))
        tally.note("overlapping", bad, f"{tp}: live segments overlap {ranges[:6]}")
