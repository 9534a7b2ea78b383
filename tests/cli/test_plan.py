"""`silt plan` shows what `silt compact --once` runs on the same state, when the plan next
changes on its own (an age threshold), and the retention a round applies first."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import cli

HOUR_MS = 3_600_000


def run(env: dict[str, str], *args: str, input: str | None = None) -> str:
    result = CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    # Ages never trigger during the test: the plan depends on the files alone.
    return {"SILT_STORE": f"file://{tmp_path}/objects",
            "SILT_METADATA": f"sqlite:///{tmp_path}/md.db",
            "SILT_PLANNER_L0_MAX_AGE_MS": str(HOUR_MS),
            "SILT_PLANNER_L0_TRIGGER_FILES": "3"}


def produce(env: dict[str, str], topic: str, *values: str) -> None:
    run(env, "produce", topic, input="".join(
        json.dumps({"key": f"k{i % 2}", "value": v}) + "\n" for i, v in enumerate(values)))


def plan(env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(run(env, "plan", "--json"))
    return out


def test_plan_is_what_compact_once_runs(env: dict[str, str]) -> None:
    run(env, "topics", "create", "d", "--partitions", "2")
    run(env, "topics", "create", "c", "--partitions", "2", "--config", "cleanup.policy=compact")
    for i in range(4):
        produce(env, "d" if i % 2 else "c", f"a{i}", f"b{i}")
    for _ in range(2):  # a round, then the next one on what it left
        planned = plan(env)
        ran = json.loads(run(env, "compact", "--once", "--json"))
        assert [j["spec_id"] for j in planned["jobs"]] == [r["spec_id"] for r in ran]
        assert all(r["outcome"] == "committed" for r in ran)
    assert plan(env)["jobs"] == []


def test_plan_says_when_it_next_changes(env: dict[str, str]) -> None:
    env = {**env, "SILT_PLANNER_L0_TRIGGER_FILES": "32"}
    run(env, "topics", "create", "d", "--partitions", "1")
    produce(env, "d", "a")
    planned = plan(env)
    assert planned["jobs"] == []
    change = planned["next_change"]
    assert re.fullmatch(r"L0 file \d+ turns 3600 s old", change["reason"]), change
    assert 0 < change["at_ms"] - planned["now_ms"] <= HOUR_MS

    text = run(env, "plan")
    line = next(line for line in text.splitlines() if line.startswith("changes: "))
    at = datetime.fromtimestamp(change["at_ms"] / 1000).strftime("%H:%M:%S")
    assert line.startswith(f"changes: at {at} (in ")
    assert line.endswith(change["reason"])


def test_plan_shows_retention_due(env: dict[str, str]) -> None:
    run(env, "topics", "create", "r", "--partitions", "1", "--config", "retention.ms=0")
    produce(env, "r", "a", "b")
    due = plan(env)["retention_due"]
    assert [(d["topic"], d["partition"], d["log_start_offset"], d["records"]) for d in due] \
        == [("r", 0, 2, 2)]
    assert "retention due: r/0 log start -> 2 (1 segments, 2 records," in run(env, "plan")
    run(env, "compact", "--once")
    assert plan(env)["retention_due"] == []
