"""The object-store fault suite, bounded: with a share of S3 requests failed by the proxy,
produce, compaction, GC and consume complete and stay correct; when retries run out the
command says so in one line and nothing is half-committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from faults import storefaults
from faults.proxy import DROP_AFTER, SLOWDOWN, FaultProxy
from objects.keys import MARKER_KEY
from objectstore import open_store


def test_a_bounded_run_loses_duplicates_and_leaves_nothing() -> None:
    result = storefaults.run(trials=2, fault_rate=0.25, seed=7)
    assert result.trials == 2 and result.acked == 2 * storefaults.ROUNDS * (
        storefaults.RECORDS_PER_ROUND)
    assert (result.lost, result.duplicated, result.misplaced, result.orphans) == (0, 0, 0, 0)
    assert result.clean and result.failures == 0, result.as_dict()["failure_messages"]
    assert result.faults_injected > 0 and result.retries >= result.faults_injected
    figures = result.as_dict()
    assert figures["clean"] is figures["ok"] is True and "per_trial" not in figures
    assert json.loads(json.dumps(figures))["requests"] == result.requests > 0


def test_the_main_prints_json_and_exits_0_when_ok(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    assert storefaults.main(["--trials", "1", "--seed", "3", "--fault-rate", "0.1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trials"] == 1 and out["lost"] == out["duplicated"] == out["orphans"] == 0


def run(args: list[str], env: dict[str, str], input: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env, input=input, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("fault", [SLOWDOWN, DROP_AFTER])
def test_giving_up_is_one_line_and_nothing_is_half_committed(
        s3_url: str, fault_proxy: FaultProxy, tmp_path: Path, fault: str) -> None:
    env = {"SILT_STORE": s3_url, "SILT_METADATA": f"sqlite:///{tmp_path}/md.db",
           "SILT_STORE_RETRY_ATTEMPTS": "2", "SILT_STORE_RETRY_BACKOFF_MS": "1",
           "SILT_STORE_RETRY_THROTTLE_BACKOFF_MS": "1"}
    assert run(["topics", "create", "t", "--partitions", "2"], env)[0] == 0
    rows = "".join(json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n" for i in range(20))
    assert run(["produce", "t"], env, input=rows)[0] == 0

    fault_proxy.configure(rate=1.0, faults=(fault,))  # every request fails: retries run out
    code, out, err = run(["produce", "t"], env, input=rows)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "gave up after 2 attempts" in err, err
    code, out, err = run(["compact", "--once", "--all"], env)
    assert code == 1 and "gave up after 2 attempts" in err.strip().splitlines()[-1]

    fault_proxy.configure(rate=0.0)
    code, out, _ = run(["consume", "t"], env)
    assert code == 0 and sorted(json.loads(line)["value"] for line in out.splitlines()) == (
        sorted(f"v{i}" for i in range(20)))  # the first produce, once; nothing of the second
    code, out, err = run(["gc", "--grace-ms", "0", "--json"],
                         {**env, "SILT_COMPACTOR_LEASE_MS": "1"})
    assert code == 0, err
    assert json.loads(out)["waiting"] == 0
    code, out, err = run(["doctor", "--json"], env)
    assert code == 0, out  # every object a live file's, every live file's object there
    data = [o.key for o in open_store(s3_url).list() if o.key != MARKER_KEY]
    assert len(data) == 1
