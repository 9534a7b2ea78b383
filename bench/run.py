"""Benchmark entry point: `python -m bench.run [--quick] [--write docs/benchmarks.md]`.

Prints one JSON document to stdout; with --write, also renders docs/benchmarks.md (with
--suite, only those suites' sections of an existing page).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.agent_process import free_port

from .compaction import run_compaction
from .consume import run_consume
from .ingest import IngestParams, run_ingest


@contextlib.contextmanager
def moto_server_process() -> Iterator[str]:
    """A moto S3 server in its own process (so its CPU is not counted as ours)."""
    port = free_port()
    bin_dir = Path(sys.executable).parent
    proc = subprocess.Popen(
        [str(bin_dir / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{url}/moto-api/").read()
                break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait()


def new_bucket(endpoint: str) -> str:
    """A new bucket on the moto server at `endpoint`, which this process and its children
    (through the AWS_* environment) then use."""
    import boto3

    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
                       "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    return bucket


@contextlib.contextmanager
def postgres_database() -> Iterator[str | None]:
    """A new, empty database on the PostgreSQL server of SILT_TEST_POSTGRES_URL, or of one
    started for the block when that is unset (harness/postgres.py), dropped afterwards;
    None (and a note on stderr) if no server can be had."""
    import sqlalchemy as sa

    from harness import postgres

    stack = contextlib.ExitStack()
    try:
        admin = stack.enter_context(postgres.admin_url())
        url = stack.enter_context(postgres.fresh_database(admin, "silt_bench"))
    except (postgres.PostgresError, sa.exc.OperationalError) as exc:
        stack.close()
        print(f"no PostgreSQL, skipped: {exc}", file=sys.stderr)
        yield None
        return
    with stack:
        yield url


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"python": platform.python_version(), "cpu": cpu, "cores": os.cpu_count(),
            "platform": platform.platform()}


def run_ingest_suite(quick: bool) -> list[dict[str, Any]]:
    """Ingest with 1 KiB and 100 B values over 1,000 partitions on file:// and S3 (moto)."""
    sizes = {1024: 20_000 if quick else 200_000, 100: 50_000 if quick else 500_000}
    results = [run_ingest(IngestParams("file", v, n, api=api))
               for api in ("produce", "produce_batch") for v, n in sizes.items()]
    with moto_server_process() as endpoint:
        for v, n in sizes.items():
            bucket = new_bucket(endpoint)
            for api in ("produce", "produce_batch"):
                results.append(run_ingest(IngestParams(f"s3://{bucket}/b", v, n // 4, api=api)))
    return results


def run_compaction_suite(quick: bool) -> list[dict[str, Any]]:
    """One compaction job over a compacted topic, 4 versions per key, random updates."""
    scale = 10 if quick else 1
    return [run_compaction(1024, 200_000 // scale), run_compaction(100, 800_000 // scale)]


def run_planning_suite(quick: bool) -> list[dict[str, Any]]:
    """Snapshot + plan per compaction round at 20k and 100k live segments (1,000 partitions
    per flush), each layout, SQLite; PostgreSQL at 100k too (not with --quick)."""
    from .planning import LAYOUTS, PlanningParams, run_planning

    if quick:
        return [run_planning(PlanningParams(n, layout, partitions=100, rounds=3))
                for n in (2_000, 5_000) for layout in LAYOUTS]
    rows = [run_planning(PlanningParams(n, layout))
            for n in (20_000, 100_000) for layout in LAYOUTS]
    for layout in LAYOUTS:
        with postgres_database() as pg_url:  # a new database per run
            if pg_url is None:
                break
            rows.append(run_planning(PlanningParams(100_000, layout), pg_url))
    return rows


def run_memory_suite(quick: bool) -> list[dict[str, Any]]:
    """Pass-1 peak RSS of a worker process, default 128 MiB budget: 50 M records over 10 k
    keys, 5 M distinct keys (each written once), and 10 M (more than the map holds)."""
    from .memory import run_dedupe_memory

    if quick:
        return [run_dedupe_memory(200_000, 1_000), run_dedupe_memory(50_000, 50_000),
                run_dedupe_memory(50_000, 50_000, budget=1 << 20)]
    return [run_dedupe_memory(n, keys) for n, keys in
            ((50_000_000, 10_000), (5_000_000, 5_000_000), (10_000_000, 10_000_000))]


def run_consume_suite(quick: bool) -> list[dict[str, Any]]:
    """Reading back what the agent wrote, 1 KiB and 100 B values, file://, as records and
    as batches."""
    scale = 10 if quick else 1
    return run_consume(1024, 100_000 // scale) + run_consume(100, 400_000 // scale)


def run_codecs_suite(quick: bool) -> list[dict[str, Any]]:
    """The protocol codec comparison; imported here so that the Kafka client and codec
    modules it loads do not sit in the heap (and slow the GC) of the other suites."""
    from .codecs import run_codecs

    return run_codecs(quick)


def run_authz_suite(quick: bool) -> list[dict[str, Any]]:
    """The authorizer's cost per decision with 1,000 ACLs (bench/authz.py)."""
    from .authz import run_authz

    return run_authz(quick)


def run_wire_suite(quick: bool) -> list[dict[str, Any]]:
    """`silt agent` driven by confluent-kafka: produce, fetch and ack latency on file://,
    ack latency on moto S3 (SQLite metadata both); the client imported only here."""
    from .wire import WireParams, run_wire

    records, seconds = (5_000, 2.0) if quick else (200_000, 20.0)
    rows = run_wire(WireParams("file", records, WIRE_LOAD_MIB_S, seconds,
                               small_producers=True, long_polls=True))
    with moto_server_process() as endpoint:
        bucket = new_bucket(endpoint)
        rows += run_wire(WireParams(f"s3://{bucket}/wire", 0, WIRE_LOAD_MIB_S, seconds))
    return rows


def run_groups_suite(quick: bool) -> list[dict[str, Any]]:
    """Consumer groups against `silt agent` (confluent-kafka): rebalance times, OffsetCommit
    throughput and rows written per commit on SQLite, the last two on PostgreSQL too (not
    with --quick)."""
    from .groups import GroupsParams, run_groups

    if quick:
        return run_groups(GroupsParams(repeats=1, session_ms=2_000, heartbeat_ms=500,
                                       commit_seconds=0.5, commits_counted=20))
    p = GroupsParams(repeats=5, session_ms=6_000, heartbeat_ms=1_000, commit_seconds=10.0)
    with postgres_database() as pg_url:
        return run_groups(p, pg_url)


def run_transactions_suite(quick: bool) -> list[dict[str, Any]]:
    """Transactional producers against `silt agent` (confluent-kafka): EndTxn latency,
    transactions/s per agent core, PUTs and metadata rows per transaction, on SQLite and
    PostgreSQL (not with --quick)."""
    from .transactions import TransactionsParams, run_transactions

    if quick:
        return run_transactions(TransactionsParams(transactions=3, producers=2, seconds=1.0,
                                                   counted=3))
    p = TransactionsParams(transactions=100, producers=8, seconds=20.0, counted=50)
    with postgres_database() as pg_url:
        return run_transactions(p, pg_url)


# The latency runs' steady load: just below saturation with librdkafka's defaults, which
# send a request per linger.ms (5 ms) carrying the few records each partition gathered
# meanwhile (~2,000 requests/s here: the request rate, not the bytes, loads the agent).
WIRE_LOAD_MIB_S = 2.0

def run_scale_suite(quick: bool) -> list[dict[str, Any]]:
    """The metadata database's scale envelope on PostgreSQL (bench/scale.py): agents x
    partitions per flush at 4 flushes/s each, swept to the knee (commit p99 > 100 ms)."""
    from .scale import sweep

    with postgres_database() as probe:
        if probe is None:
            return []
    return sweep(postgres_database, quick)


def run_spark_suite(quick: bool) -> list[dict[str, Any]]:
    """Structured Streaming source and sink on one executor core, GETs per micro-batch, and
    end-to-end latency at the default trigger (pyspark imported only here)."""
    from .spark_stream import run_spark_stream

    if quick:
        return run_spark_stream(4_000, 1024, 1_000, samples=3)
    return run_spark_stream(100_000, 1024, 20_000, samples=20)


def run_secure_suite(quick: bool) -> list[dict[str, Any]]:
    """The wire suite over SASL_SSL next to PLAINTEXT, and set-up time per mechanism."""
    from .secure_wire import run

    return run(5_000, 1, 3) if quick else run(200_000, 5, 20)


SUITES = {"ingest": run_ingest_suite, "compaction": run_compaction_suite,
          "planning": run_planning_suite, "consume": run_consume_suite,
          "memory": run_memory_suite, "codecs": run_codecs_suite, "authz": run_authz_suite,
          "wire": run_wire_suite, "groups": run_groups_suite, "scale": run_scale_suite,
          "transactions": run_transactions_suite, "spark": run_spark_suite,
          "secure": run_secure_suite}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    parser.add_argument("--suite", action="append", choices=sorted(SUITES),
                        help="which suites to run (default: all)")
    parser.add_argument("--write", metavar="MD",
                        help="also write this markdown report (with --suite and an existing"
                             " MD: only those suites' sections)")
    args = parser.parse_args(argv)
    suites = args.suite or list(SUITES)
    report: dict[str, Any] = {"machine": machine(), "quick": args.quick, "results": []}
    for name in suites:
        report["results"] += SUITES[name](args.quick)
    print(json.dumps(report, indent=2))
    if args.write:
        from .report import render, update

        page = Path(args.write)
        page.write_text(update(page.read_text(), report, suites)
                        if args.suite and page.exists() else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
