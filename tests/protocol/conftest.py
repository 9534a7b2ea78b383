"""Fixtures: a `silt agent` subprocess on file:// + SQLite (and on moto S3 + PostgreSQL)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .server import AgentProcess


@pytest.fixture
def agent_proc(tmp_path: Path) -> Iterator[AgentProcess]:
    """`silt agent` on file:// + SQLite in tmp_path (topics: create them through
    `agent_proc.metadata()` before the clients start)."""
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log").start()
    yield proc
    proc.terminate()


@pytest.fixture(params=["file+sqlite", "s3+postgres"])
def any_agent(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AgentProcess]:
    """`silt agent` on each store + metadata pair."""
    if request.param == "file+sqlite":
        proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                            tmp_path / "agent.log")
    else:
        s3_url = request.getfixturevalue("s3_url")
        proc = AgentProcess(s3_url, request.getfixturevalue("postgres_url"),
                            tmp_path / "agent.log",
                            {k: os.environ[k] for k in os.environ if k.startswith("AWS_")})
    yield proc.start()
    proc.terminate()
