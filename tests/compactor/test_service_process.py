"""`silt compactor` as a real process: a SIGTERM in the middle of a job lets the job finish
within compactor.shutdown.timeout.ms, or abandons it and releases its lease (asserted on the
jobs table), then exits 0; `--log-format json` writes one JSON object per line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent import Agent, AgentConfig
from harness.agent_process import REPO
from metadata import MetadataStore
from metadata import schema as s
from objectstore import open_store

WAIT_S = 60.0
PARTITIONS = 3


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def held_files(md: MetadataStore) -> dict[int, int]:
    """file id -> the job holding it, for every file a job holds."""
    with md.read() as conn:
        rows = conn.execute(sa.select(s.files.c.id, s.files.c.job_id)
                            .where(s.files.c.job_id.is_not(None))).all()
    return {int(r.id): int(r.job_id) for r in rows}


@pytest.mark.parametrize(("timeout_ms", "outcome"),
                         [(0, s.JOB_ABANDONED), (600_000, s.JOB_COMMITTED)])
def test_sigterm_mid_job(tmp_path: Path, metadata_url: str, timeout_ms: int,
                         outcome: str) -> None:
    store_url = f"file://{tmp_path}/objects"
    md = MetadataStore.open(metadata_url, create=True)
    md.create_topic("c", PARTITIONS, {"cleanup.policy": "compact"})
    store = open_store(store_url)
    for i in range(2):  # two flushes: two L0 files, one job at l0.trigger.files = 2
        with Agent(store, md, AgentConfig(linger_ms=60_000)) as agent:
            for p in range(PARTITIONS):
                agent.produce("c", p, b"k", b"v%d" % i)
    reached, release, log_path = tmp_path / "reached", tmp_path / "release", tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SILT_PLANNER_L0_TRIGGER_FILES": "2",
           "SILT_COMPACTOR_SHUTDOWN_TIMEOUT_MS": str(timeout_ms)}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.compactor.paused_compactor", str(reached),
             str(release), "--store", store_url, "--metadata", metadata_url, "compactor",
             "--poll-interval", "0.2", "--log-format", "json"],
            env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: reached.exists() or proc.poll() is not None, "the paused job")
        assert proc.poll() is None, log_path.read_text()
        (job,) = md.list_jobs(s.JOB_LEASED)
        assert held_files(md) == {fid: job.id for fid in job.input_file_ids}
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "stopping (SIGTERM)" in log_path.read_text(), "the stop")
        release.write_text("go on")
        assert proc.wait(WAIT_S) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended = md.get_job(job.id)
    assert ended.state == outcome
    assert md.list_jobs(s.JOB_LEASED) == [] and held_files(md) == {}
    with md.read() as conn:
        pending = conn.execute(sa.select(sa.func.count()).select_from(s.files)
                               .where(s.files.c.state == s.FILE_PENDING)).scalar_one()
    assert pending == 0  # outputs committed (live) or abandoned, none left pending
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    (report,) = [line["job"] for line in lines if "job" in line]
    assert (report["job_id"], report["outcome"]) == (job.id, outcome)
    md.close()
