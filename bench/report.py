"""Render a benchmark JSON report as docs/benchmarks.md."""

from __future__ import annotations

from typing import Any

INGEST_COLUMNS = [
    ("store", "store"), ("value_bytes", "value B"), ("records", "records"),
    ("mib_per_s_per_core", "MiB/s per core"), ("records_per_s_per_core", "records/s per core"),
    ("mib_per_s_wall", "MiB/s wall"), ("flushes", "flushes"),
    ("put_requests_per_flush", "PUT requests per flush"),
    ("latency_ms_p50", "ack p50 ms"), ("latency_ms_p99", "ack p99 ms"),
]


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    sep = "|" + "---|" * len(columns)
    body = ["| " + " | ".join(str(r.get(k, "")) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def render(report: dict[str, Any]) -> str:
    """The markdown page: machine, how to rerun, one table per benchmark."""
    m = report["machine"]
    ingest = [r for r in report["results"] if r["benchmark"] == "ingest"]
    return f"""# Benchmarks

Measured on {m['cpu']} ({m['cores']} cores), Python {m['python']}, {m['platform']}.
"Per core" divides by the benchmark process's CPU seconds; the moto S3 server runs in its
own process and is not counted.

Rerun: `make bench` (JSON on stdout and this page rewritten), or
`.venv/bin/python -m bench.run --suite ingest --write docs/benchmarks.md`.

## Agent ingest (1,000 partitions, defaults: flush every 250 ms or 8 MiB)

{_table(ingest, INGEST_COLUMNS)}
"""
