"""The benchmark harness runs end to end at tiny sizes, so it cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.run import main


def test_quick_run_prints_json_and_writes_markdown(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "benchmarks.md"
    assert main(["--quick", "--suite", "compaction", "--suite", "memory", "--suite", "consume",
                 "--write", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    kinds = {r["benchmark"] for r in report["results"]}
    assert kinds == {"compaction", "dedupe_memory", "consume"}
    comp = [r for r in report["results"] if r["benchmark"] == "compaction"]
    assert all(r["gets"] == 2 * r["input_files"] for r in comp)
    assert all(r["records_out"] < r["records_in"] for r in comp)
    assert "## Compaction" in out.read_text()


@pytest.mark.parametrize("api", ["produce", "produce_batch"])
def test_ingest_runs_both_agent_apis(api: str) -> None:
    from bench.ingest import IngestParams, run_ingest

    r = run_ingest(IngestParams("file", 100, 3200, partitions=100, api=api))
    assert (r["api"], r["records"]) == (api, 3200)
    assert r["flushes"] >= 1 and r["put_requests_per_flush"] == 1.0
    assert r["mib_per_s_per_core"] > 0 and r["latency_ms_p50"] is not None


def test_codec_suite_compares_identical_bytes() -> None:
    from bench.codecs import run_codecs

    rows = run_codecs(quick=True)
    assert {r["library"] for r in rows} == {"kio", "kafka-python"}
    assert all(r["identical_bytes"] and r["produce_v9_bytes"] > 1_000_000 for r in rows)
    assert all(r["decode_produce_us"] > 0 and r["encode_fetch_us"] > 0 for r in rows)


def test_wire_suite_measures_a_real_agent(tmp_path: Path) -> None:
    from bench.report import render
    from bench.run import machine
    from bench.wire import WireParams, run_wire

    rows = run_wire(WireParams("file", records=2_000, rate_mib_s=1.0, seconds=1.0))
    by_run = {r["measure"]: r for r in rows}
    assert set(by_run) == {"produce", "fetch", "latency"}
    assert by_run["fetch"]["records"] == 2_000  # every produced record read back
    assert by_run["produce"]["mib_per_s_per_agent_core"] > 0
    latency = by_run["latency"]
    assert 0 < latency["ack_ms_p50"] <= latency["ack_ms_p99"]
    assert latency["puts_per_s"] > 0  # objects were written while it ran
    page = render({"machine": machine(), "results": rows})
    assert "## Kafka wire protocol" in page and "| file | latency |" in page
