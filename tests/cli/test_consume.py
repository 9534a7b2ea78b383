"""`silt consume`: a start past the log end says where the end is; `--follow` keeps printing
new records until Ctrl-C (exit 0); a closed stdout pipe (`| head`) ends it quietly. And
`silt topics alter --config k=v` (the alias of --set), validated."""

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
from click.testing import CliRunner

from agent import Agent, AgentConfig
from cli.main import cli
from fileformat.control import build_marker
from harness.agent_process import REPO
from metadata import MetadataStore
from objectstore import open_store
from tests.idempotence.helpers import client_batch

WAIT_S = 120.0


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SILT_")}
    return {**clean, "PYTHONPATH": str(REPO), "SILT_STORE": f"file://{tmp_path}/objects",
            "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}


def run(env: dict[str, str], *args: str, input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def records(n: int, start: int = 0) -> str:
    return "".join(json.dumps({"partition": 0, "key": f"k{i}", "value": f"v{i}"}) + "\n"
                   for i in range(start, start + n))


def test_from_offset_past_the_end_names_the_log_end(env: dict[str, str]) -> None:
    assert run(env, "topics", "create", "t", "--partitions", "2")[0] == 0
    assert run(env, "produce", "t", input=records(3))[0] == 0
    code, out, err = run(env, "consume", "t", "--partition", "0", "--from-offset", "7")
    assert (code, out) == (0, "")
    assert "t/0: offset 7 is at or past the log end (3)" in err
    code, out, err = run(env, "consume", "t", "--partition", "0", "--from-offset", "2")
    assert code == 0 and err == ""
    assert [json.loads(line)["offset"] for line in out.splitlines()] == [2]


def test_follow_prints_new_records_until_sigint(env: dict[str, str], tmp_path: Path) -> None:
    assert run(env, "topics", "create", "t", "--partitions", "1")[0] == 0
    assert run(env, "produce", "t", input=records(2))[0] == 0
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "consume", "t", "--follow"],
                                env=env, stdout=o, stderr=e)
    try:
        wait_until(lambda: out.read_text().count("\n") == 2 or proc.poll() is not None,
                   "the first records")
        assert run(env, "produce", "t", input=records(3, start=2))[0] == 0
        wait_until(lambda: out.read_text().count("\n") == 5 or proc.poll() is not None,
                   "the records produced meanwhile")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT_S) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["offset"], r["value"]) for r in got] == [(i, f"v{i}") for i in range(5)]
    assert err.read_text() == ""


@pytest.mark.parametrize("follow", [False, True])
def test_closed_stdout_pipe_ends_quietly(env: dict[str, str], follow: bool) -> None:
    assert run(env, "topics", "create", "t", "--partitions", "1")[0] == 0
    assert run(env, "produce", "t", input=records(20_000))[0] == 0
    cmd = [sys.executable, "-m", "cli", "consume", "t"] + (["--follow"] if follow else [])
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # what `| head -n 1` does
        code = proc.wait(WAIT_S)
        err = proc.stderr.read().decode()
    assert json.loads(first)["offset"] == 0
    assert (code, err) == (0, "")


def test_alter_config_alias_is_validated(env: dict[str, str]) -> None:
    assert run(env, "topics", "create", "t", "--partitions", "1")[0] == 0
    code, out, _ = run(env, "topics", "alter", "t", "--config", "retention.ms=1000")
    assert code == 0 and "retention.ms=1000" in out
    code, _, err = run(env, "topics", "alter", "t", "--config", "retention.ms=soon")
    assert code == 1 and err.startswith("silt: ")
    code, _, err = run(env, "topics", "alter", "t", "--config", "no.such.config=1")
    assert code == 1 and err.startswith("silt: ")
    code, out, _ = run(env, "topics", "describe", "t", "--json")
    assert json.loads(out)["configs"] == {"retention.ms": "1000"}
    assert run(env, "topics", "delete", "t")[0] == 0
    assert json.loads(run(env, "topics", "list", "--json")[1]) == []


def test_isolation_read_committed_leaves_aborted_and_open_transactions_out(
        env: dict[str, str]) -> None:
    assert run(env, "topics", "create", "t", "--partitions", "1")[0] == 0
    md = MetadataStore.open(env["SILT_METADATA"])
    agent = Agent(open_store(env["SILT_STORE"]), md, AgentConfig(linger_ms=3_600_000))
    try:
        aborted, committed, open_ = (md.allocate_producer_id() for _ in range(3))
        for pid, tag, end in ((aborted, b"x", False), (committed, b"c", True),
                              (open_, b"o", None)):
            agent.produce_batch("t", 0, client_batch(pid, 0, 0, 2, tag, transactional=True))
            if end is not None:
                agent.produce_batch("t", 0, build_marker(
                    pid, 0, commit=end, coordinator_epoch=0, timestamp_ms=0), coordinator=True)
        agent.flush()
    finally:
        agent.close()
        md.close()

    def values(*extra: str) -> list[tuple[int, str]]:
        code, out, err = run(env, "consume", "t", *extra)
        assert (code, err) == (0, "")
        return [(r["offset"], r["value"]) for r in map(json.loads, out.splitlines())]

    # offsets: x 0-1, ABORT 2, c 3-4, COMMIT 5, o 6-7 (open): markers are never records
    assert values("--isolation", "read_committed") == [(3, "c-0"), (4, "c-1")]
    assert values() == [(0, "x-0"), (1, "x-1"), (3, "c-0"), (4, "c-1"), (6, "o-0"),
                        (7, "o-1")]
