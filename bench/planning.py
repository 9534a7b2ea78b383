"""Compaction planning cost per round: the metadata snapshot and the planner's proposal at a
given number of live segments (1,000 partitions per flush, as an agent's flush writes them).

Files are committed through the metadata store as an agent's flushes and compactions'
outputs would be (one segment per partition each; no objects: planning reads none), at
the levels of a layout. Each timed round first commits one more flush, as rounds do in a
running cluster, then times `Compactor.snapshot` (metadata snapshot and its conversion for
the planner) and `propose`. The first round of a handle reads everything ("cold"); later
rounds read only what changed ("warm", the median is reported).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from clock import ManualClock
from compactor import Compactor
from fileformat import FileLayout
from metadata import MetadataStore
from metadata.models import ChunkMeta
from metadata.segments import chunk_index
from objectstore import open_store
from planner import PlannerConfig, propose

START_MS = 1_700_000_000_000
TOPIC = "bench"
# Layouts: what the planner finds each round.
STEADY = "steady"  # every level below its trigger: nothing to do
L0_JOB = "l0-job"  # L0 past l0.max.age.ms: one job merging every L0 file
CLEAN = "clean"  # a compacted topic, all dirty: one whole-log job of every file
LAYOUTS = (STEADY, L0_JOB, CLEAN)


@dataclass(frozen=True)
class PlanningParams:
    """One run: `live_segments` at the last round (`partitions` per file)."""

    live_segments: int
    layout: str = STEADY
    partitions: int = 1000
    rounds: int = 6


def _levels(files: int, rounds: int, config: PlannerConfig) -> list[int]:
    """The level of each file, highest first (as offsets age down the levels): half the L0
    trigger in L0 (at least the `rounds` flushes the rounds add last), one file short of
    the trigger in L1 to L3, the rest at the top level (no size-tiered merge takes it on)."""
    l0 = min(files, max(config.l0_trigger_files // 2, rounds))
    out: list[int] = []
    rest = files - l0
    for level in (1, 2, 3):
        n = min(config.level_trigger_files - 1, rest)
        out = [level] * n + out
        rest -= n
    return [config.max_level] * rest + out + [0] * l0


def run_planning(p: PlanningParams, metadata_url: str | None = None) -> dict[str, Any]:
    """Build the layout, then time `rounds` rounds of snapshot + plan."""
    config = PlannerConfig()
    clock = ManualClock(START_MS)
    with tempfile.TemporaryDirectory(prefix="silt-bench-") as tmp:
        url = metadata_url or f"sqlite:///{tmp}/md.db"
        md = MetadataStore.open(url, clock=clock, create=True)
        policy = "compact" if p.layout == CLEAN else "delete"
        md.create_topic(TOPIC, p.partitions, {"cleanup.policy": policy})
        files = p.live_segments // p.partitions
        n = 0

        def flush(level: int) -> None:
            nonlocal n
            n += 1
            fid = md.register_pending_file(f"bench/{n:06d}", level=level,
                                           holds_compacted=level > 0 and policy == "compact")
            chunks = [ChunkMeta(TOPIC, q, 10, 0, 1000, 1000, 10, 1, START_MS, START_MS, 0, 0,
                                10) for q in range(p.partitions)]
            md.commit_file(fid, FileLayout(
                size=1000 * p.partitions, data_offset=0, data_length=1000 * p.partitions,
                meta_offset=1000 * p.partitions, meta_length=100, meta_crc=0,
                chunks=[chunk_index(c) for c in chunks]))

        setup = time.perf_counter()
        for level in _levels(files, p.rounds, config)[:files - p.rounds]:
            flush(level)
        setup = time.perf_counter() - setup
        # The files are 1 s old (no age trigger: l0.max.age.ms is 30 s), or past it.
        clock.advance(config.l0_max_age_ms if p.layout == L0_JOB else 1_000)
        comp = Compactor(open_store(f"memory://bench-{n}"), md, clock=clock)
        snaps, plans, jobs, job_segments = [], [], 0, 0
        for _ in range(p.rounds):
            flush(0)
            t0 = time.perf_counter()
            _, snap = comp.snapshot()
            t1 = time.perf_counter()
            plan = propose(snap, clock.now_ms(), config)
            t2 = time.perf_counter()
            snaps.append(t1 - t0)
            plans.append(t2 - t1)
            jobs = len(plan.jobs)
            live = sum(len(f.segments) for f in snap.files)
            in_jobs = {fid for j in plan.jobs for fid in j.input_file_ids}
            job_segments = sum(len(f.segments) for f in snap.files if f.file_id in in_jobs)
        md.close()
    warm_snap, warm_plan = statistics.median(snaps[1:]), statistics.median(plans[1:])
    return {
        "benchmark": "planning",
        "metadata": "postgresql" if url.startswith("postgres") else "sqlite",
        "layout": p.layout,
        "live_segments": live,
        "live_files": files,
        "jobs": jobs,
        "job_segments": job_segments,
        "cold_snapshot_s": round(snaps[0], 3),
        "cold_plan_s": round(plans[0], 3),
        "cold_round_s": round(snaps[0] + plans[0], 3),
        "snapshot_s": round(warm_snap, 3),
        "plan_s": round(warm_plan, 3),
        "round_s": round(warm_snap + warm_plan, 3),
        "setup_s": round(setup, 1),
    }
