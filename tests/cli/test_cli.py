"""`silt` end to end: topics, produce with defaults, consume, bad input."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from objectstore import open_store


def run(args: list[str], env: dict[str, str], input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env, input=input, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def local_env(tmp_path: Path) -> dict[str, str]:
    return {"SILT_STORE": f"file://{tmp_path}/objects",
            "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}


def _workload(n: int, partitions: int) -> tuple[str, list[dict[str, object]]]:
    rng = random.Random(7)
    rows: list[dict[str, object]] = []
    for i in range(n):
        row: dict[str, object] = {"partition": i % partitions, "key": f"k{rng.randrange(10**6)}",
                                  "value": f"value-{i}"}
        if i % 10 == 0:
            row["headers"] = {"trace": str(i)}
        rows.append(row)
    return "".join(json.dumps(r) + "\n" for r in rows), rows


def _produce_consume_100k(env: dict[str, str], tmp_path: Path) -> None:
    assert run(["topics", "create", "big", "--partitions", "1000"], env)[0] == 0
    text, rows = _workload(100_000, 1000)
    src = tmp_path / "in.jsonl"
    src.write_text(text)
    code, out, err = run(["produce", "big", "--file", str(src)], env)
    assert code == 0, err
    acks = [json.loads(line) for line in out.splitlines()]
    assert len(acks) == 100_000
    # The number of objects equals the number of flushes, far fewer than partitions.
    objects = list(open_store(env["SILT_STORE"]).list("data/"))
    assert 1 <= len(objects) < 100
    code, out, err = run(["consume", "big"], env)
    assert code == 0, err
    got = [json.loads(line) for line in out.splitlines()]
    assert len(got) == 100_000
    by_part: dict[int, list[dict[str, object]]] = {}
    for row in rows:
        by_part.setdefault(int(row["partition"]), []).append(row)  # type: ignore[call-overload]
    i = 0
    for p in range(1000):
        for offset, row in enumerate(by_part[p]):
            rec = got[i]
            i += 1
            assert (rec["partition"], rec["offset"]) == (p, offset)
            assert (rec["key"], rec["value"]) == (row["key"], row["value"])
            assert rec["headers"] == row.get("headers", {})
    stats = json.loads(run(["stats", "--json"], env)[1])
    assert stats["levels"][0]["files"] == len(objects)


@pytest.mark.slow
def test_100k_records_1000_partitions_file_sqlite(
    local_env: dict[str, str], tmp_path: Path
) -> None:
    _produce_consume_100k(local_env, tmp_path)


@pytest.mark.slow
def test_100k_records_1000_partitions_s3_postgres(
    s3_url: str, postgres_url: str, tmp_path: Path
) -> None:
    _produce_consume_100k({"SILT_STORE": s3_url, "SILT_METADATA": postgres_url}, tmp_path)


def test_bad_line_exits_nonzero_and_commits_nothing_after_it(local_env: dict[str, str]) -> None:
    run(["topics", "create", "t", "--partitions", "2"], local_env)
    lines = ['{"key": "a", "value": "1"}', '{"key": "b", "value": "2", "partition": 1}',
             '{"key": "c", "value": ', '{"key": "d", "value": "4"}']
    code, out, err = run(["produce", "t"], local_env, input="\n".join(lines) + "\n")
    assert code == 1
    assert "line 3" in err and "2 record(s) before it were committed" in err
    assert len(err.strip().splitlines()) == 1
    assert len(out.splitlines()) == 2
    code, out, _ = run(["consume", "t"], local_env)
    assert sorted(json.loads(x)["key"] for x in out.splitlines()) == ["a", "b"]


@pytest.mark.parametrize("line,message", [
    ('[1]', "JSON object"),
    ('{"key": 1}', "key must be a string"),
    ('{"partition": -1}', "non-negative"),
    ('{"partition": 9, "key": "k"}', "out of range"),
    ('{"colour": "red"}', "unknown field"),
    ('{"value_b64": "!!"}', "base64"),
])
def test_bad_input_messages(local_env: dict[str, str], line: str, message: str) -> None:
    run(["topics", "create", "t", "--partitions", "2"], local_env)
    code, out, err = run(["produce", "t"], local_env, input=line + "\n")
    assert code == 1 and message in err and out == ""


def test_usage_and_known_errors(local_env: dict[str, str]) -> None:
    assert run(["topics", "create", "t"], local_env)[0] == 2  # missing --partitions
    code, _, err = run(["topics", "create", "t", "--partitions", "1", "--config", "bogus=1"],
                       local_env)
    assert code == 1 and "bogus" in err
    code, _, err = run(["consume", "missing"], local_env)
    assert code == 1 and "missing" in err


def test_binary_and_tombstones_round_trip(local_env: dict[str, str]) -> None:
    run(["topics", "create", "s", "--partitions", "1", "--config", "cleanup.policy=compact"],
        local_env)
    lines = ['{"key_b64": "AP8=", "value_b64": "/wA="}', '{"key": "k", "value": null}']
    assert run(["produce", "s"], local_env, input="\n".join(lines))[0] == 0
    out = [json.loads(x) for x in run(["consume", "s"], local_env)[1].splitlines()]
    assert out[0]["key_b64"] == "AP8=" and out[0]["value_b64"] == "/wA="
    assert out[1]["key"] == "k" and out[1]["value"] is None


def test_topics_describe_json(local_env: dict[str, str]) -> None:
    run(["topics", "create", "t", "--partitions", "2"], local_env)
    run(["produce", "t"], local_env, input='{"partition": 1, "key": "a", "value": "b"}\n')
    desc = json.loads(run(["topics", "describe", "t", "--json"], local_env)[1])
    assert desc["partition_detail"][1]["next_offset"] == 1
    assert desc["partition_detail"][1]["segments"] == 1
    assert desc["configs"] == {}


def test_topics_alter_grow_delete_records_and_delete(local_env: dict[str, str]) -> None:
    run(["topics", "create", "t", "--partitions", "1", "--config", "retention.ms=5"], local_env)
    lines = "".join(f'{{"partition": 0, "key": "k{i}", "value": "v"}}\n' for i in range(4))
    run(["produce", "t"], local_env, input=lines)
    code, _, err = run(["topics", "alter", "t", "--set", "cleanup.policy=compact"], local_env)
    assert code == 1 and "without the key hashes compaction needs" in err  # t holds records
    assert run(["topics", "alter", "t", "--set", "max.message.bytes=2048",
                "--delete", "retention.ms"], local_env)[:2] == (
        0, "topic t configs: max.message.bytes=2048\n")
    code, _, err = run(["topics", "alter", "t", "--set", "retention.ms=soon"], local_env)
    assert code == 1 and "retention.ms" in err
    assert run(["topics", "add-partitions", "t", "--partitions", "3"], local_env)[0] == 0
    assert run(["topics", "add-partitions", "t", "--partitions", "2"], local_env)[0] == 1
    assert run(["topics", "delete-records", "t", "--partition", "0", "--before", "2"],
               local_env)[1] == "t/0 log start offset 2\n"
    code, _, err = run(["topics", "delete-records", "t", "--partition", "0", "--before", "9"],
                       local_env)
    assert code == 1 and "high watermark is 4" in err
    desc = json.loads(run(["topics", "describe", "t", "--json"], local_env)[1])
    assert (desc["partitions"], desc["configs"]) == (3, {"max.message.bytes": "2048"})
    assert desc["partition_detail"][0]["log_start_offset"] == 2
    assert run(["topics", "delete", "t"], local_env)[:2] == (0, "deleted topic t\n")
    assert json.loads(run(["topics", "list", "--json"], local_env)[1]) == []


def test_compact_once_all_then_consume(local_env: dict[str, str]) -> None:
    run(["topics", "create", "s", "--partitions", "2", "--config", "cleanup.policy=compact"],
        local_env)
    run(["topics", "create", "e", "--partitions", "2"], local_env)
    for rnd in range(3):
        lines = [json.dumps({"partition": i % 2, "key": f"k{i % 3}", "value": f"{rnd}-{i}"})
                 for i in range(12)]
        assert run(["produce", "s"], local_env, input="\n".join(lines))[0] == 0
        assert run(["produce", "e"], local_env, input="\n".join(lines))[0] == 0
    plan = json.loads(run(["plan", "--json", "--all"], local_env)[1])
    assert len(plan["jobs"]) == 1 and plan["jobs"][0]["trigger"] == "forced_all"
    code, out, err = run(["compact", "--once", "--all", "--json"], local_env)
    assert code == 0, err
    (report,) = json.loads(out)
    assert report["outcome"] == "committed"
    assert report["requests"]["GET"] == 2 * report["input_files"] == 12
    assert report["stats"]["duplicates_dropped"] == 36 - 6
    state = [json.loads(x) for x in run(["consume", "s"], local_env)[1].splitlines()]
    assert sorted((r["partition"], r["key"], r["value"], r["offset"]) for r in state) == [
        (0, "k0", "2-6", 15), (0, "k1", "2-10", 17), (0, "k2", "2-8", 16),
        (1, "k0", "2-9", 16), (1, "k1", "2-7", 15), (1, "k2", "2-11", 17)]
    events = run(["consume", "e"], local_env)[1].splitlines()
    assert len(events) == 36
    assert json.loads(run(["stats", "--json"], local_env)[1])["levels"][0]["level"] == 1


def test_retention_moves_the_log_start(local_env: dict[str, str]) -> None:
    import time

    run(["topics", "create", "r", "--partitions", "2", "--config", "retention.ms=1000"],
        local_env)
    old = "".join(json.dumps({"partition": i % 2, "value": f"old-{i}"}) + "\n" for i in range(6))
    assert run(["produce", "r"], local_env, input=old)[0] == 0
    time.sleep(1.1)
    new = "".join(json.dumps({"partition": i % 2, "value": f"new-{i}"}) + "\n" for i in range(4))
    assert run(["produce", "r"], local_env, input=new)[0] == 0
    code, out, err = run(["retention", "--json"], local_env)
    assert code == 0, err
    got = json.loads(out)
    assert sorted((p["partition"], p["log_start_offset"], p["records"])
                  for p in got["partitions"]) == [(0, 3, 3), (1, 3, 3)]
    assert len(got["retired_files"]) == 1
    rows = [json.loads(x) for x in run(["consume", "r"], local_env)[1].splitlines()]
    assert sorted((r["partition"], r["offset"], r["value"]) for r in rows) == [
        (0, 3, "new-0"), (0, 4, "new-2"), (1, 3, "new-1"), (1, 4, "new-3")]
    code, _, err = run(["consume", "r", "--partition", "0", "--from-offset", "0"], local_env)
    assert code == 1 and "below log start 3" in err
    assert run(["retention"], local_env)[1] == "nothing past retention\n"
