"""Fixtures: `silt agent` subprocesses on file:// + SQLite, and on each store + metadata pair
(file + SQLite, moto S3 + PostgreSQL) through `backend`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .server import AgentProcess, Backend


@pytest.fixture
def agent_proc(tmp_path: Path) -> Iterator[AgentProcess]:
    """`silt agent` on file:// + SQLite in tmp_path (topics: create them through
    `agent_proc.metadata()` before the clients start)."""
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log").start()
    yield proc
    proc.terminate()


@pytest.fixture(params=["file+sqlite", "s3+postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """One store + metadata pair that agents of a test share."""
    if request.param == "file+sqlite":
        return Backend(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db", tmp_path)
    s3_url = request.getfixturevalue("s3_url")
    return Backend(s3_url, request.getfixturevalue("postgres_url"), tmp_path,
                   {k: os.environ[k] for k in os.environ if k.startswith("AWS_")})


@pytest.fixture
def any_agent(backend: Backend) -> Iterator[AgentProcess]:
    """`silt agent` on each store + metadata pair."""
    proc = backend.agent("agent").start()
    yield proc
    proc.terminate()


@pytest.fixture
def two_agents(backend: Backend) -> Iterator[tuple[AgentProcess, AgentProcess]]:
    """Two `silt agent` processes on one store and one metadata store, on each pair."""
    procs = [backend.agent(f"agent{i}").start() for i in (0, 1)]
    yield procs[0], procs[1]
    for proc in procs:
        proc.terminate()
