"""The scale envelope of one metadata database: agents x partitions per flush on PostgreSQL.

Each agent is a process committing flushes as `Agent._flush_object` does, without the object
PUT: `register_pending_file`, then `commit_produced` of a layout holding one chunk per
partition, at 4 flushes/s (250 ms apart; a flush that takes longer delays the next, as the
agent's flush loop does). Each agent writes its own partitions (a topic per agent), which is
what leaderless placement gives (agent/placement.py: clients send a partition to its leader),
or, with `shared`, every agent writes every partition of one topic (the contended worst
case: commits lock the same partition rows).

Measured per run: commits/s achieved against the target, commit latency p50/p99
(`commit_produced`, and the whole flush's metadata work: register + commit), rows written
per commit (PostgreSQL's own tuple counters for the run's database), and the CPU seconds
the run's PostgreSQL backends and the agents' processes spent per commit: on a 2-core machine the
agents' Python is most of the load, so the database's own CPU per commit is what says how
far one PostgreSQL goes (the extrapolation in docs/scaling.md).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FLUSH_INTERVAL_S = 0.25  # the agent's default linger: 4 flushes/s
CHUNK_BYTES = 1_000


@dataclass(frozen=True)
class ScaleParams:
    """One run: `agents` processes, each flush holding `partitions` chunks."""

    agents: int
    partitions: int
    seconds: float = 8.0
    shared: bool = False


def _topic(p: ScaleParams, agent: int) -> str:
    return "shared" if p.shared else f"agent-{agent}"


def _agent_loop(url: str, p: ScaleParams, agent: int, ready: Any, go: Any, out: Any,
                may_close: Any) -> None:
    """One agent: flushes at 4/s until the run ends; sends its latencies and CPU to `out`."""
    from fileformat import FileLayout
    from metadata import MetadataStore
    from metadata.models import ChunkMeta
    from metadata.segments import chunk_index

    md = MetadataStore.open(url)
    topic = _topic(p, agent)
    now_ms = int(time.time() * 1000)
    chunks = [chunk_index(ChunkMeta(topic, q, 10, 0, CHUNK_BYTES, 0, 0, 1, now_ms, now_ms, 0,
                                    0, 10)) for q in range(p.partitions)]
    size = CHUNK_BYTES * p.partitions
    layout = FileLayout(size=size + 100, data_offset=0, data_length=size, meta_offset=size,
                        meta_length=100, meta_crc=0, chunks=chunks)
    commit_ms: list[float] = []
    flush_ms: list[float] = []
    # Warm up (connection, compiled statements) with one flush, then wait for the start.
    md.commit_produced(md.register_pending_file(f"scale/{agent}/warm", level=0,
                                                holds_compacted=False), layout, batches={})
    ready.put(agent)
    go.wait()
    cpu0 = time.process_time()
    end = time.monotonic() + p.seconds
    due = time.monotonic()
    n = 0
    while time.monotonic() < end:
        t0 = time.perf_counter()
        fid = md.register_pending_file(f"scale/{agent}/{n:08d}", level=0, holds_compacted=False)
        t1 = time.perf_counter()
        md.commit_produced(fid, layout, batches={})
        t2 = time.perf_counter()
        commit_ms.append((t2 - t1) * 1000)
        flush_ms.append((t2 - t0) * 1000)
        n += 1
        due += FLUSH_INTERVAL_S
        time.sleep(max(0.0, due - time.monotonic()))
    out.put((commit_ms, flush_ms, time.process_time() - cpu0))
    may_close.wait()  # the database's processes are measured before they exit
    md.close()


def _backend_pids(url: str) -> list[int]:
    """The PostgreSQL backends connected to the database of `url`, but this one."""
    import sqlalchemy as sa

    from metadata.engine import engine_url

    engine = sa.create_engine(engine_url(url))
    try:
        with engine.connect() as conn:
            return [int(r[0]) for r in conn.execute(sa.text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"))]
    finally:
        engine.dispose()


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes `pids` have spent so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def _tuples_written(url: str) -> int:
    """Rows inserted, updated and deleted in the database of `url` so far."""
    import sqlalchemy as sa

    from metadata.engine import engine_url

    engine = sa.create_engine(engine_url(url))
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.text(
                "SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database"
                " WHERE datname = current_database()")).one()
            return int(row[0])
    finally:
        engine.dispose()


def _settled_tuples(url: str, pids: list[int], timeout_s: float = 30.0) -> int:
    """`_tuples_written` once the run's backends `pids` have exited: each reports its
    counters as it exits, a moment after its client closed the connection."""
    deadline = time.monotonic() + timeout_s
    while set(pids) & set(_backend_pids(url)) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)
    return _tuples_written(url)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def run_scale(p: ScaleParams, url: str) -> dict[str, Any]:
    """Create the topics, run `p.agents` flush loops for `p.seconds`, measure."""
    from metadata import MetadataStore

    md = MetadataStore.open(url, create=True)
    for topic in {_topic(p, a) for a in range(p.agents)}:
        md.create_topic(topic, p.partitions, {})
    md.close()
    ctx = mp.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go, may_close = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=_agent_loop, args=(url, p, a, ready, go, out, may_close))
             for a in range(p.agents)]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=300)
    pids = _backend_pids(url)
    pg0, rows0 = _cpu_s(pids), _tuples_written(url)
    go.set()
    results = [out.get(timeout=p.seconds + 300) for _ in procs]
    pg_cpu = _cpu_s(pids) - pg0
    may_close.set()
    for proc in procs:
        proc.join()
    rows = _settled_tuples(url, pids) - rows0
    commit_ms = [v for r in results for v in r[0]]
    flush_ms = [v for r in results for v in r[1]]
    agents_cpu = sum(r[2] for r in results)
    commits = len(commit_ms)
    target = p.agents / FLUSH_INTERVAL_S
    return {
        "benchmark": "scale",
        "agents": p.agents,
        "partitions_per_flush": p.partitions,
        "placement": "shared" if p.shared else "own",
        "commits": commits,
        "commits_per_s": round(commits / p.seconds, 1),
        "target_commits_per_s": round(target, 1),
        "commit_ms_p50": round(statistics.median(commit_ms), 1) if commit_ms else 0.0,
        "commit_ms_p99": round(_pct(commit_ms, 0.99), 1),
        "flush_md_ms_p99": round(_pct(flush_ms, 0.99), 1),
        "rows_per_commit": round(rows / commits, 1) if commits else 0.0,
        "pg_cpu_ms_per_commit": round(1000 * pg_cpu / commits, 2) if commits else 0.0,
        "agent_cpu_ms_per_commit": round(1000 * agents_cpu / commits, 2) if commits else 0.0,
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }


SWEEP_AGENTS = (1, 2, 4, 8, 16, 32)
SWEEP_PARTITIONS = (10, 100, 1000)
KNEE_P99_MS = 100.0


def sweep(new_database: Any, quick: bool) -> list[dict[str, Any]]:
    """Agents doubled per partition count until commit p99 passes 100 ms or the commits fall
    behind 90 % of the target rate; one shared-placement run at the largest own-placement
    point that held. `new_database()` is a context manager giving a fresh database URL."""
    rows: list[dict[str, Any]] = []
    seconds = 3.0 if quick else 8.0
    for partitions in ((10, 100) if quick else SWEEP_PARTITIONS):
        held: ScaleParams | None = None
        for agents in ((1, 2) if quick else SWEEP_AGENTS):
            params = ScaleParams(agents, partitions, seconds)
            with new_database() as url:
                row = run_scale(params, url)
            rows.append(row)
            if (row["commit_ms_p99"] > KNEE_P99_MS
                    or row["commits_per_s"] < 0.9 * row["target_commits_per_s"]):
                break
            held = params
        if held is not None and not quick:
            with new_database() as url:
                rows.append(run_scale(ScaleParams(held.agents, partitions, seconds, True), url))
    return rows
