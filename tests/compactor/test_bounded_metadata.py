"""The metadata stays bounded: produce and compact for thousands of flushes (an in-process
agent and compactor, file store, SQLite, a manual clock) and the row counts stay flat,
because GC prunes deleted files with their segments and finished jobs."""

from __future__ import annotations

import tempfile
from pathlib import Path

import sqlalchemy as sa

from agent import Agent, AgentConfig
from clock import ManualClock
from compactor import Compactor, CompactorConfig
from metadata import MetadataStore
from metadata.config import MetadataConfig
from objectstore import open_store
from planner import PlannerConfig

FLUSHES = 2_000
FLUSHES_PER_ROUND = 10
PARTITIONS = 2
TABLES = ("files", "segments", "jobs")


def row_counts(md: MetadataStore) -> dict[str, int]:
    with md.engine.connect() as conn:
        return {t: int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one())
                for t in TABLES}


def test_row_counts_stay_flat_over_thousands_of_flushes(tmp_path: Path) -> None:
    if Path("/dev/shm").is_dir():  # tmpfs: no fsync wait per object and per commit
        tmp_path = Path(tempfile.mkdtemp(dir="/dev/shm"))
    clock = ManualClock()
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", clock=clock, config=MetadataConfig(
        jobs_retention_ms=20_000, deleted_files_retention_ms=5_000), create=True)
    md.create_topic("events", PARTITIONS, {"retention.ms": "30000"})  # delete policy
    md.create_topic("state", PARTITIONS, {"cleanup.policy": "compact"})
    store = open_store(f"file://{tmp_path}/objects")
    compactor = Compactor(store, md, CompactorConfig(
        grace_ms=2_000, planner=PlannerConfig(l0_trigger_files=4, level_trigger_files=4,
                                              max_level=2)), clock=clock)
    counts = []
    with Agent(store, md, AgentConfig(linger_ms=600_000), clock=clock) as agent:
        for n in range(FLUSHES):
            for p in range(PARTITIONS):
                agent.produce("events", p, None, b"e%d" % n)
                agent.produce("state", p, b"k%d" % (n % 8), b"v%d" % n)
            agent.flush()
            clock.advance(1_000)
            if n % FLUSHES_PER_ROUND == FLUSHES_PER_ROUND - 1:
                reports = compactor.run_once()
                assert all(r.outcome == "committed" for r in reports), reports
                counts.append(row_counts(md))
    jobs = md.list_jobs()
    md.close()

    # Without pruning every flush would leave a file row and 2 x PARTITIONS segment rows,
    # and every round a job row or more: thousands by now. Job ids count every job run.
    rounds = len(counts)
    assert rounds == FLUSHES // FLUSHES_PER_ROUND
    assert jobs and jobs[-1].id - len(jobs) >= rounds // 2, jobs  # jobs ran; old rows went
    for table in TABLES:
        history = [c[table] for c in counts]
        # Flat: the last half never exceeds the peak of the second quarter (the steady
        # state is reached well before), far below what was ever written.
        settled = max(history[rounds // 4:rounds // 2])
        assert max(history[rounds // 2:]) <= settled, (table, history)
    assert max(c["files"] for c in counts) < 60, counts
    assert max(c["segments"] for c in counts) < 200, counts
    assert max(c["jobs"] for c in counts) < 10, counts
