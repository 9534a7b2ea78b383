"""The benchmark harness runs end to end at tiny sizes, so it cannot rot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    # the floor was measured in the same run, on the same bytes, and sits beside the figure
    assert all(r["floor_mb_per_s_per_core"] > 0 and 0 < r["ratio_to_floor"] < 1.5
               for r in comp)
    assert all(0 < r["output_mib"] < r["input_mib"] for r in comp)
    # pass 1 in a worker process: its peak RSS within budget + 32 MiB, a too-small map ends
    memory = [r for r in report["results"] if r["benchmark"] == "dedupe_memory"]
    assert [r["partial_clean"] for r in memory] == [False, False, True]
    assert all(r["within_goal"] and r["peak_growth_mib"] > 0 for r in memory)
    text = out.read_text()
    assert "## Pass-1 memory" in text and "| peak RSS growth MiB |" in text
    assert "## Compaction" in text and "| floor MB/s per core | ratio to floor |" in text
    for r in comp:
        assert f"| {r['floor_mb_per_s_per_core']} | {r['ratio_to_floor']} |" in text


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


def test_authz_suite_times_each_decision_under_the_goal() -> None:
    from bench.authz import bindings, run_authz

    assert len(bindings(1_000)) == 1_000
    rows = run_authz(quick=True)
    assert {r["acls"] for r in rows} == {1_000, 10_000}
    single = [r for r in rows if "operations" not in r["case"] and "any" not in r["case"]]
    assert all(0 < r["us_per_decision"] < 50 for r in single)  # loose: a shared CI machine


def test_wire_suite_measures_a_real_agent(tmp_path: Path) -> None:
    from bench.report import render
    from bench.run import machine
    from bench.wire import CAPACITY_CONNECTIONS, WireParams, run_wire

    rows = run_wire(WireParams("file", records=2_000, rate_mib_s=1.0, seconds=1.0,
                               small_producers=True, long_polls=True))
    by_run = {r["measure"]: r for r in rows}
    assert set(by_run) == {"produce", "fetch", "latency", "50 small producers",
                           "50 long-polling consumers", "the trickle alone",
                           "long-polls beyond the trickle", "floor: empty Fetches",
                           "floor: empty Fetches at the latency run's pace",
                           f"{CAPACITY_CONNECTIONS} raw long-polls (capacity)"}
    polls = by_run["50 long-polling consumers"]
    assert polls["fetch_requests"] > 0 and polls["requests_per_s_per_agent_core"] > 0
    # counted by the agent: at most one a wake-up, and most Fetches wake once or not at all
    assert polls["round_trips_per_fetch"] is not None
    assert 0 <= polls["round_trips_per_fetch"] <= 2
    assert by_run["floor: empty Fetches"]["requests_per_s_per_agent_core"] > 0
    # every connection admitted and answered
    capacity = by_run[f"{CAPACITY_CONNECTIONS} raw long-polls (capacity)"]
    assert capacity["fetch_requests"] >= CAPACITY_CONNECTIONS
    assert capacity["requests_per_s_per_agent_core"] > 0 and capacity["agent_busy"] > 0
    alone = by_run["the trickle alone"]  # the same records a second, no consumer
    assert alone["records"] > 0 and alone["agent_cpu_s"] >= 0
    assert by_run["long-polls beyond the trickle"]["fetch_requests"] == polls["fetch_requests"]
    small = by_run["50 small producers"]
    assert small["records"] == 50 * 20  # every one acked (errors would have raised)
    # counted by the agent itself: at least one request per producer, at most one a record
    assert 50 <= small["produce_requests"] <= small["records"]
    assert small["agent_cpu_us_per_request"] > 0 and small["ack_ms_p99"] > 0
    assert by_run["fetch"]["records"] == 2_000  # every produced record read back
    assert by_run["produce"]["mib_per_s_per_agent_core"] > 0
    latency = by_run["latency"]
    assert 0 < latency["ack_ms_p50"] <= latency["ack_ms_p99"]
    assert latency["puts_per_s"] > 0  # objects were written while it ran
    # counted by the agent: at most one Produce a record
    assert 0 < latency["produce_requests"] <= latency["records"]
    assert latency["agent_cpu_us_per_request"] > 0
    paced = by_run["floor: empty Fetches at the latency run's pace"]  # every one answered
    assert paced["fetch_requests"] == int(latency["produce_requests"] / 1.0)
    assert paced["agent_cpu_us_per_request"] > 0
    page = render({"machine": machine(), "results": rows})
    assert "## Kafka wire protocol" in page and "| file | latency |" in page


def test_groups_suite_rewrites_only_its_section(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from bench.report import render
    from bench.run import machine

    page = tmp_path / "benchmarks.md"
    consume = {"benchmark": "consume", "value_bytes": 7, "records": 77, "partitions": 3}
    page.write_text(render({"machine": machine(), "results": [consume]}))
    assert main(["--quick", "--suite", "groups", "--write", str(page)]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert {r["benchmark"] for r in rows} == {"groups"}
    text = page.read_text()
    assert "| 7 | 77 | 3 |" in text  # the consume section was left as it was
    assert text.count("## Consumer groups") == 1 and "| rebalance after SIGKILL | 1 |" in text

    rebalances = {r["measure"]: r for r in rows if r["measure"].startswith("rebalance")}
    assert set(rebalances) == {"rebalance after close()", "rebalance after SIGKILL"}
    for r in rebalances.values():  # the assignments came after the revocations
        assert r["rejoin_ms_median"] >= 0 and r["ms_median"] >= r["notice_ms_median"]
    commits = [r for r in rows if r["measure"] == "OffsetCommit"]
    assert {(r["clients"], r["partitions_per_commit"]) for r in commits} == \
        {(1, 1), (4, 1), (4, 12)}
    assert all(r["commits"] > 0 and r["agent_cpu_s"] > 0 for r in commits)
    _assert_one_row_per_partition(rows)


def _assert_one_row_per_partition(rows: list[dict[str, Any]]) -> None:
    """A commit writes one group_offsets row per partition and nothing else; the first
    commit of a group also takes its coordinator lease (one row)."""
    def by_table(text: str) -> dict[str, int]:  # "agents 1, group_offsets 12"
        return {t: int(n) for t, n in (item.split() for item in text.split(", ") if item)}

    written = {r["partitions_per_commit"]: r for r in rows if r["measure"] == "rows written"}
    assert set(written) == {1, 12}
    for n, r in written.items():
        assert r["group_offsets_rows_per_commit"] == n
        first = by_table(r["first_commit_rows"])
        assert (first["group_offsets"], first["group_coordinators"]) == (n, 1)
        # besides, only the agent's registry heartbeats (one every 2 s)
        assert set(first) | set(by_table(r["other_rows"])) <= \
            {"group_offsets", "group_coordinators", "agents"}
        assert "group_offsets" not in by_table(r["other_rows"])


def test_groups_commits_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    from bench.groups import GroupsParams, run_groups_on

    p = GroupsParams(repeats=0, session_ms=2_000, heartbeat_ms=500, commit_seconds=0.3,
                     commit_clients=(2,), commits_counted=10)
    rows = run_groups_on(postgres_url, tmp_path, p, rebalance=False)
    assert {r["metadata"] for r in rows} == {"postgresql"}
    assert all(r["commits"] > 0 for r in rows if r["measure"] == "OffsetCommit")
    _assert_one_row_per_partition(rows)


def test_planning_suite_times_rounds_of_each_layout(tmp_path: Path) -> None:
    from bench.report import PLANNING_COLUMNS, render
    from bench.run import machine, run_planning_suite

    rows = run_planning_suite(quick=True)
    assert [(r["layout"], r["live_segments"]) for r in rows] == [
        (layout, n) for n in (2_000, 5_000) for layout in ("steady", "l0-job", "clean")]
    for r in rows:
        assert r["jobs"] == (0 if r["layout"] == "steady" else 1), r
        assert all(k in r for k, _ in PLANNING_COLUMNS), r  # every column is measured
        assert r["live_files"] * 100 == r["live_segments"]
    clean = [r for r in rows if r["layout"] == "clean"]
    assert all(r["job_segments"] == r["live_segments"] for r in clean)  # every file
    page = render({"machine": machine(), "results": rows})
    assert "## Compaction planning" in page and "| sqlite | clean | 5000 |" in page


def test_scale_counts_commits_rows_and_database_cpu(postgres_url: str) -> None:
    from bench.report import SCALE_COLUMNS, render
    from bench.run import machine
    from bench.scale import ScaleParams, run_scale

    # Long enough for the database's CPU to pass /proc's 10 ms ticks (~5 ms a commit).
    row = run_scale(ScaleParams(agents=2, partitions=100, seconds=2.0), postgres_url)
    # each agent flushes every 250 ms from 0 s (and at 2.0 s if its loop gets there first)
    assert 2 <= row["commits"] <= 2 * 9
    # a commit writes at least a segment row and a partition row per partition
    assert row["rows_per_commit"] >= 2 * 100
    assert row["pg_cpu_ms_per_commit"] > 0 and row["agent_cpu_ms_per_commit"] > 0
    assert 0 < row["commit_ms_p50"] <= row["commit_ms_p99"]
    page = render({"machine": machine(), "results": [row]})
    assert "## The scale envelope" in page
    assert "| " + " | ".join(title for _, title in SCALE_COLUMNS) + " |" in page


def test_transactions_suite(tmp_path: Path) -> None:
    """The transactions figures: EndTxn latencies, throughput, and per transaction two
    PUTs (the records' flush and the markers') and the transaction row's three writes."""
    from bench.report import render
    from bench.run import machine
    from bench.transactions import TransactionsParams, run_transactions_on

    p = TransactionsParams(transactions=2, producers=2, seconds=0.5, counted=2)
    rows = run_transactions_on(f"sqlite:///{tmp_path}/md.db", tmp_path, p)
    by = {r["measure"]: r for r in rows}
    assert 0 < by["latency"]["end_txn_ms_p50"] <= by["latency"]["txn_ms_p99"]
    assert by["throughput"]["transactions"] > 0
    assert by["cost"]["puts_per_txn"] == 2.0  # nothing else shared the two flushes
    assert "transactions 3.00" in by["cost"]["rows_by_table_per_txn"]
    page = render({"machine": machine(), "results": rows})
    assert "## Transactions" in page and "| sqlite | 2 | 2.0 |" in page


def test_spark_stream_section_renders() -> None:
    """The Spark suite's section from its rows (the suite itself needs a JVM: `make bench`)."""
    from bench.report import render
    from bench.run import SUITES, machine

    assert "spark" in SUITES
    rows = [{"benchmark": "spark_stream", "side": "source (to noop)", "records": 10,
             "gets_per_batch": "1-2", "records_per_s_per_core": 123},
            {"benchmark": "spark_stream_latency", "samples": 3, "p50_ms": 456}]
    page = render({"machine": machine(), "results": rows})
    assert "## Spark Structured Streaming" in page
    assert "| source (to noop) | 10 |" in page and "| 123 |" in page and "| 1-2 |" in page
    assert "| 3 | 456 |" in page


def test_secure_section_compares_within_each_round() -> None:
    """The TLS section's summary: medians, each round's ratio, and the cipher's floor."""
    from bench.report import render
    from bench.run import machine

    def row(n: int, listener: str, measure: str, rate: float) -> dict[str, Any]:
        return {"benchmark": "secure", "round": n, "listener": listener, "measure": measure,
                "records": 10, "agent_cpu_s": 1.0, "mib_per_s_per_agent_core": rate,
                "mib_per_s_wall": 1.0}

    tls = "SASL_SSL SCRAM-SHA-512"
    rows = [row(0, "PLAINTEXT", "produce", 100), row(0, tls, "produce", 90),
            row(1, "PLAINTEXT", "produce", 200), row(1, tls, "produce", 100),
            row(0, "PLAINTEXT", "fetch", 400), row(0, tls, "fetch", 300),
            row(1, "PLAINTEXT", "fetch", 400), row(1, tls, "fetch", 200),
            {"benchmark": "secure", "measure": "cipher", "version": "TLSv1.3",
             "cipher": "X", "encrypt_mib_s_per_core": 1200, "decrypt_mib_s_per_core": 900}]
    page = render({"machine": machine(), "results": rows})
    assert "produce 150.0 -> 95.0 MiB/s per agent core (-37%; within a round: -10%, -50%;" \
           " median -30%)" in page
    assert "fetch 400.0 -> 250.0 MiB/s per agent core (-38%; within a round: -25%, -50%;" \
           " median -38%)" in page
    assert "fetch 300.0 MiB/s per agent core (-25%)" in page  # 1 / (1/400 + 1/1200)


def test_update_keeps_a_sections_hand_written_subsections() -> None:
    """A suite rerun with --write replaces its section's table and prose, and keeps the
    "### " subsections written under it by hand (no suite renders one)."""
    from bench.report import render, update
    from bench.run import machine

    def consume(records: int) -> dict[str, Any]:
        return {"benchmark": "consume", "value_bytes": 7, "records": records, "partitions": 3}

    page = render({"machine": machine(), "results": [consume(77)]})
    heading = "## Consume"
    at = page.index("\n## ", page.index(heading) + 1)
    page = page[:at] + "\n### Measured by hand\n\nkept words\n" + page[at:]
    again = update(page, {"machine": machine(), "results": [consume(88)]}, ["consume"])
    assert "| 7 | 88 | 3 |" in again and "| 7 | 77 | 3 |" not in again
    assert again.count("### Measured by hand\n\nkept words\n") == 1
    assert again.index(heading) < again.index("| 7 | 88 |") < again.index("### Measured")
    assert again.index("### Measured") < again.index("\n## ", again.index(heading) + 1)
    assert update(again, {"machine": machine(), "results": [consume(88)]},
                  ["consume"]) == again


def test_loop_floor_answers_every_request_both_ways() -> None:
    from bench.loop_floor import run

    report = run(rounds=1, requests=200)  # the client waits for every reply: else it hangs
    assert [r["read"] for r in report["results"]] == ["stream task", "protocol"]
    assert all(r["cpu_us_per_request"] > 0 for r in report["results"])
