"""`silt --verbose`: a failed compaction job is its one-line summary (the traceback only with
--verbose), and a failed flush is said once, not twice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.agent_process import REPO


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SILT_")}
    return {**clean, "PYTHONPATH": str(REPO), "SILT_STORE": f"file://{tmp_path}/objects",
            "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}


def silt(env: dict[str, str], *args: str, input: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], env=env, input=input,
                          capture_output=True, text=True, check=False)


def record(i: int) -> str:
    return json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n"


@pytest.fixture
def failing_job(env: dict[str, str], tmp_path: Path) -> None:
    """Two produced objects, one of them deleted: the job merging them fails."""
    assert silt(env, "topics", "create", "t", "--partitions", "1").returncode == 0
    for i in range(2):
        assert silt(env, "produce", "t", input=record(i)).returncode == 0
    first = sorted((tmp_path / "objects" / "data").iterdir())[0]
    first.unlink()


@pytest.mark.usefixtures("failing_job")
def test_failed_job_is_one_line_without_verbose(env: dict[str, str]) -> None:
    done = silt(env, "compact", "--once", "--all")
    assert done.returncode == 1
    assert [line for line in done.stdout.splitlines() if " failed: " in line], done.stdout
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [line for line in done.stderr.splitlines()
                                        if line.startswith("silt: 1 of 1 compaction jobs")]
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.usefixtures("failing_job")
def test_failed_job_traceback_with_verbose(env: dict[str, str]) -> None:
    done = silt(env, "--verbose", "compact", "--once", "--all")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "FileNotFoundError" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("silt: 1 of 1 compaction jobs failed")


def test_failed_flush_is_said_once(env: dict[str, str], tmp_path: Path) -> None:
    assert silt(env, "topics", "create", "t", "--partitions", "1").returncode == 0
    assert silt(env, "produce", "t", input=record(0)).returncode == 0
    data = tmp_path / "objects" / "data"
    shutil.rmtree(data)
    data.write_bytes(b"")  # a file where the objects' directory was: every PUT fails
    done = silt(env, "produce", "t", input=record(1))
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "failed, nothing committed" in lines[0], done.stderr
    verbose = silt(env, "-v", "produce", "t", input=record(2))
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr
