"""Every `--json` command's text and JSON output, byte for byte: the text is the JSON
document's values in the command's fixed layout, and the JSON is one line (`silt costs`
aside, tested in test_costs.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import cli


def run(env: dict[str, str], *args: str, input: str | None = None,
        code: int = 0) -> tuple[str, str]:
    result = CliRunner().invoke(cli, list(args), env=env, input=input, catch_exceptions=False)
    assert result.exit_code == code, result.stderr
    return result.stdout, result.stderr


def doc(env: dict[str, str], *args: str, code: int = 0) -> Any:
    """The command's JSON document, checked to be one line."""
    out, _ = run(env, *args, "--json", code=code)
    assert out.endswith("\n") and out.count("\n") == 1, out
    return json.loads(out)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = {"SILT_STORE": f"file://{tmp_path}/objects",
           "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}
    run(env, "topics", "create", "t", "--partitions", "2", "--config", "retention.ms=100000000")
    run(env, "topics", "create", "s", "--partitions", "2", "--config", "cleanup.policy=compact")
    lines = "".join(json.dumps({"partition": i % 2, "key": f"k{i % 3}", "value": f"v{i}"})
                    + "\n" for i in range(12))
    for _ in range(2):
        run(env, "produce", "t", input=lines)
        run(env, "produce", "s", input=lines)
    return env


def test_init(env: dict[str, str]) -> None:
    report = doc(env, "init")
    assert report["bucket_created"] is None and report["marker_written"] is False
    assert run(env, "init")[0] == (
        f"cluster {report['cluster_id']}: store {report['store']} (marker present),"
        f" metadata {report['metadata']}\n")


def test_config_show(env: dict[str, str]) -> None:
    shown = doc(env, "config", "show")
    text = run(env, "config", "show")[0].splitlines()
    assert len(text) == 1 + len(shown)
    key_width = max(map(len, shown))
    assert text[0].startswith("key".ljust(key_width) + "  value")
    for line, (key, v) in zip(text[1:], shown.items(), strict=True):
        origin = "default" if v["source"] == "default" else f"{v['source']} {v['from']}"
        assert line.startswith(key.ljust(key_width) + "  ") and line.endswith("  " + origin)
    assert f"  {shown['store.url']['value']}  " in text[1]


def test_topics_list_and_describe(env: dict[str, str]) -> None:
    assert doc(env, "topics", "list") == [
        {"name": "s", "partitions": 2, "configs": {"cleanup.policy": "compact"}},
        {"name": "t", "partitions": 2, "configs": {"retention.ms": "100000000"}}]
    assert run(env, "topics", "list")[0] == ("s\tpartitions=2\tcleanup.policy=compact\n"
                                             "t\tpartitions=2\tcleanup.policy=delete\n")
    row = doc(env, "topics", "describe", "t")
    assert list(row) == ["name", "partitions", "configs", "partition_detail"]
    expected = ("topic t  partitions=2\n  retention.ms=100000000\n"
                "  partition  log_start  next_offset  segments  records  bytes\n")
    for p in row["partition_detail"]:
        assert (p["partition"], p["log_start_offset"], p["next_offset"], p["segments"],
                p["records"]) == (p["partition"], 0, 12, 2, 12)
        expected += (f"  {p['partition']:>9}          0           12         2       12"
                     f"  {p['bytes']}\n")
    assert run(env, "topics", "describe", "t")[0] == expected


def test_stats(env: dict[str, str]) -> None:
    st = doc(env, "stats")
    (level,) = st["levels"]
    live = st["bytes_by_state"]["live"]
    assert (st["topics"], level["level"], level["files"], level["segments"]) == (2, 0, 4, 8)
    assert st["files_by_state"] == {"live": 4}
    assert run(env, "stats")[0] == (
        "level  files  bytes  segments\n"
        f"    0      4  {level['bytes']:>5}         8\n"
        "state  files  bytes\n"
        f"live   4      {live}\n"
        f"in the store: {live} bytes (live {live}, awaiting GC 0)\n")


def test_plan_compact_and_their_reports(env: dict[str, str]) -> None:
    planned = doc(env, "plan", "--all")
    (job,) = planned["jobs"]
    assert (planned["waiting"], planned["next_change"], planned["retention_due"]) == (
        [], None, [])
    assert run(env, "plan", "--all")[0] == (
        f"job {job['spec_id']}: forced_all: --all: 4 files\n"
        f"  files [1, 2, 3, 4] ({job['input_bytes']:,} bytes) -> L1; 2 compacted partitions"
        " (2 whole-log)\n")
    out, err = run(env, "compact", "--once", "--all")
    assert re.fullmatch(
        rf"job {job['spec_id']} committed: 4 files [\d,]+ B -> 2 files [\d,]+ B; records"
        r" 48 -> 30 \(duplicates 18, tombstones 0 dropped\); requests"
        r" \{'PUT': 2, 'GET': 8\}; \d+\.\d\ds\n", out), out
    assert err == ""
    assert run(env, "compact", "--once", "--all")[0] == "no job to run now\n"
    assert doc(env, "compact", "--once", "--all") == []
    waiting = doc(env, "plan")
    assert waiting["jobs"] == [] and len(waiting["waiting"]) == 2
    assert run(env, "plan")[0] == "".join(
        ["no job to run now\n", *(f"waiting: {w}\n" for w in waiting["waiting"])])


def test_retention_gc_and_doctor(env: dict[str, str], tmp_path: Path) -> None:
    run(env, "topics", "create", "r", "--partitions", "1", "--config", "retention.ms=0")
    run(env, "produce", "r", input='{"value": "a"}\n')
    run(env, "produce", "r", input='{"value": "b"}\n')
    result = doc(env, "retention")
    (change,) = result["partitions"]
    assert (change["topic"], change["partition"], change["log_start_offset"],
            change["segments"], change["records"]) == ("r", 0, 2, 2, 2)
    assert len(result["retired_files"]) == 2
    assert run(env, "retention")[0] == "nothing past retention\n"
    run(env, "produce", "r", input='{"value": "c"}\n')
    assert run(env, "retention")[0] == (
        f"r/0: log start -> 3 (1 segments, 1 records, {change['bytes'] // 2} bytes)\n"
        "1 files retired (deleted after the GC grace)\n")

    assert doc(env, "gc") == {"deleted": 0, "keys": [], "waiting": 3, "grace_ms": 60_000,
                              "uploads_aborted": 0}
    assert run(env, "gc")[0] == ("deleted 0 objects; 3 files wait for their grace period"
                                 " (60,000 ms) or lease (60,000 ms); aborted 0 unfinished"
                                 " uploads\n")
    assert run(env, "gc", "--grace-ms", "0")[0].startswith("deleted 3 objects; 0 files wait"
                                                          " for their grace period (0 ms)")

    report = doc(env, "doctor")
    assert report["ok"] is True and report["problems"] == []
    assert run(env, "doctor")[0] == (
        f"{report['live_files']} live files ({report['live_bytes']:,} bytes),"
        f" {report['objects_listed']} objects listed; no problem; requests"
        f" {report['requests']}\n")
    (tmp_path / "objects" / "data" / "orphan").write_bytes(b"x")
    report = doc(env, "doctor", code=1)
    (problem,) = report["problems"]
    assert (problem["kind"], problem["key"]) == ("orphan", "data/orphan")
    text = run(env, "doctor", code=1)[0].splitlines()
    assert text[0].startswith("orphan: data/orphan: 1 bytes, no file row; written")
    assert text[1:] == [f"{report['live_files']} live files ({report['live_bytes']:,} bytes),"
                        f" {report['objects_listed']} objects listed; 1 problems; requests"
                        f" {report['requests']}"]
