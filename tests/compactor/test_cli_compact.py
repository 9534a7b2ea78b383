"""`silt plan` / `silt compact --once --all` after several `silt produce` rounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.compactor.cli_support import BACKENDS, backend_env, run


def consume(env: dict[str, str], topic: str) -> list[dict[str, Any]]:
    code, out, err = run(["consume", topic], env)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    return backend_env(request, tmp_path)


def test_compact_once_all_json_then_consume(env: dict[str, str]) -> None:
    assert run(["topics", "create", "s", "--partitions", "3", "--config",
                "cleanup.policy=compact"], env)[0] == 0
    assert run(["topics", "create", "e", "--partitions", "2"], env)[0] == 0
    produced: dict[str, list[dict[str, Any]]] = {"s": [], "e": []}
    rounds = 3
    for rnd in range(rounds):
        for topic, parts in (("s", 3), ("e", 2)):
            rows = []
            for i in range(15):
                row: dict[str, Any] = {"partition": i % parts, "key": f"k{i % 4}",
                                       "value": f"{rnd}-{i}"}
                if i % 5 == 0:
                    row["headers"] = {"round": str(rnd)}
                if topic == "s" and rnd == rounds - 1 and i == 14:
                    row["value"] = None  # a tombstone: k2 of partition 2
                rows.append(row)
            code, out, err = run(["produce", topic], env,
                                 input="".join(json.dumps(r) + "\n" for r in rows))
            assert code == 0, err
            for row, ack in zip(rows, (json.loads(x) for x in out.splitlines()), strict=True):
                assert ack["partition"] == row["partition"]
                produced[topic].append({**row, "offset": ack["offset"]})
    before_s = consume(env, "s")
    assert len(before_s) == 45

    code, out, err = run(["plan", "--json"], env)
    assert code == 0, err
    plan = json.loads(out)
    assert set(plan) == {"jobs", "waiting", "now_ms", "next_change", "retention_due"}
    assert plan["jobs"] == [] and plan["waiting"]  # 6 fresh L0 files: below the triggers
    code, out, err = run(["plan", "--json", "--all"], env)
    assert code == 0, err
    (job,) = json.loads(out)["jobs"]
    assert job["trigger"] == "forced_all" and len(job["input_files"]) == 2 * rounds
    assert job["compacted_partitions"] == job["whole_log_partitions"] == 3

    code, out, err = run(["compact", "--once", "--all", "--json"], env)
    assert code == 0, err
    (report,) = json.loads(out)
    assert report["outcome"] == "committed"
    assert report["input_files"] == 2 * rounds
    assert report["requests"]["GET"] == 2 * report["input_files"]

    # The compacted topic: one record per key per partition, the latest, offsets unchanged.
    latest: dict[tuple[int, str], dict[str, Any]] = {}
    for row in produced["s"]:
        latest[(row["partition"], row["key"])] = row
    got = consume(env, "s")
    assert sorted((r["partition"], r["offset"]) for r in got) == sorted(
        (r["partition"], r["offset"]) for r in latest.values())
    for r in got:
        want = latest[(r["partition"], r["key"])]
        assert (r["offset"], r["value"]) == (want["offset"], want["value"])
        assert r["headers"] == want.get("headers", {})
    assert any(r["value"] is None for r in got)  # the fresh tombstone is retained
    # The delete-policy topic: everything, in order.
    events = consume(env, "e")
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in events] == sorted(
        (r["partition"], r["offset"], r["key"], r["value"]) for r in produced["e"])
    stats = json.loads(run(["stats", "--json"], env)[1])
    assert [lv["level"] for lv in stats["levels"] if lv["files"]] == [1]

    # Running again has nothing to do (one clean file per kind: settled, not rewritten).
    code, out, err = run(["compact", "--once", "--all", "--json"], env)
    assert code == 0, err
    assert json.loads(out) == []
    assert json.loads(run(["stats", "--json"], env)[1]) == stats
    assert consume(env, "s") == got
    assert consume(env, "e") == events



def test_compact_rejects_flags_it_would_ignore(tmp_path: Path) -> None:
    """Without --once, `silt compact` is the worker loop: --all and --json would be ignored;
    --master is ignored without --engine spark. Each is a one-line usage error, exit 2."""
    env = {"SILT_STORE": f"file://{tmp_path}/objects",
           "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}
    loop = "would be ignored without --once (compact then runs the worker loop, as silt compactor)"
    cases = [
        (["--all"], f"Error: --all {loop}"),
        (["--all", "--json"], f"Error: --all and --json {loop}"),
        (["--json", "--memory", "64"], f"Error: --json {loop}"),
        (["--once", "--master", "local[1]"], "Error: --master needs --engine spark"),
        (["--once", "--master", "local[1]", "--spark-conf", "a=b"],
         "Error: --master and --spark-conf need --engine spark"),
    ]
    for args, message in cases:
        code, out, err = run(["compact", *args], env)
        assert code == 2 and out == "", args
        assert [line for line in err.splitlines() if line.startswith("Error:")] == [message]
    assert not (tmp_path / "md.db").exists()  # refused before anything was opened


def test_compact_exits_1_naming_the_first_failed_job(tmp_path: Path) -> None:
    """A job that fails (an input object is gone) is reported, and compact exits 1 with one
    line on stderr naming it, with --json too (its stdout stays the reports)."""
    env = {"SILT_STORE": f"file://{tmp_path}/objects",
           "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}
    assert run(["topics", "create", "s", "--partitions", "1", "--config",
                "cleanup.policy=compact"], env)[0] == 0
    for rnd in range(2):
        lines = "".join(json.dumps({"key": "k", "value": f"v{rnd}"}) + "\n" for _ in range(3))
        assert run(["produce", "s"], env, input=lines)[0] == 0
    gone = sorted((tmp_path / "objects").rglob("*.silt"))[0]
    gone.unlink()
    code, out, err = run(["compact", "--once", "--all", "--json"], env)
    assert code == 1
    (report,) = json.loads(out)
    assert report["outcome"] == "failed" and gone.name in report["error"]
    assert err.splitlines() == [
        f"silt: 1 of 1 compaction jobs failed; first: job {report['spec_id']}:"
        f" {report['error'].splitlines()[0]}"]
    assert report["error"].startswith("FileNotFoundError: ")
