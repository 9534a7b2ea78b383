"""kcat (librdkafka's CLI, Debian package `kcat`) produces and consumes through `silt agent`."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from .server import AgentProcess


def _kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        if os.environ.get("CI") or os.environ.get("SILT_REQUIRE_SERVERS"):
            pytest.fail("kcat is not installed (CI installs the Debian package `kcat`)")
        pytest.skip("kcat is not installed")
    return path


def test_kcat_produces_and_consumes(agent_proc: AgentProcess) -> None:
    kcat = _kcat()
    md = agent_proc.metadata()
    md.create_topic("events", 2)
    md.close()
    lines = "".join(f"k{i}:value {i}\n" for i in range(50))
    subprocess.run([kcat, "-P", "-b", agent_proc.bootstrap, "-t", "events", "-p", "1", "-K:"],
                   input=lines, text=True, check=True, timeout=120)
    out = subprocess.run([kcat, "-C", "-b", agent_proc.bootstrap, "-t", "events", "-p", "1",
                          "-o", "beginning", "-e", "-f", "%o %k %s\\n"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.splitlines() == [f"{i} k{i} value {i}" for i in range(50)]
