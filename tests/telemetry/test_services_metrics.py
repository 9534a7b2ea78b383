"""`silt agent` and `silt compactor` as real processes on moto S3 + PostgreSQL, each with its
metrics port: Kafka clients produce, a consumer group fetches and commits, the compactor
commits one job and fails another (an input object deleted behind its back); then every
metric the example Grafana dashboard (deploy/grafana-dashboard.json) names is scraped over
HTTP, with the values this traffic must have given, and /healthz and /readyz answer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import boto3
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from harness.agent_process import REPO, free_port
from metadata import MetadataStore

from ..protocol.server import AgentProcess

pytestmark = pytest.mark.slow

DASHBOARD = REPO / "deploy" / "grafana-dashboard.json"
WAIT_S = 60.0
KEYS = 10  # per partition and flush of the compacted topic
T = TypeVar("T")
Samples = dict[str, list[tuple[dict[str, str], float]]]


def get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def scrape(port: int) -> Samples:
    """Every sample of /metrics by sample name (`silt_x_total`, `silt_y_bucket`, ...)."""
    status, text = get(port, "/metrics")
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the sample `name` with exactly these labels (a subset match), or None."""
    for have, v in samples.get(name, []):
        if all(have.get(k) == want for k, want in labels.items()):
            return v
    return None


def wait_for(what: str, check: Callable[[], T | None], logs: Callable[[], str]) -> T:
    """check()'s first truthy result, polled until WAIT_S passes (then fail with `logs`)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n{logs()}")
        time.sleep(0.1)


def dashboard_metrics() -> set[str]:
    """The metric names in the dashboard's queries."""
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"]
             for t in p.get("targets", [])]
    names = {m for e in exprs for m in re.findall(r"\b(?:silt|process)_[a-z0-9_]+\b", e)}
    assert len(names) >= 20, names
    return names


class CompactorProcess:
    """`python -m cli compactor` on a store + metadata pair, its output in `log_path`."""

    def __init__(self, store_url: str, metadata_url: str, log_path: Path,
                 env: dict[str, str]) -> None:
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli", "--store", store_url, "--metadata", metadata_url,
                 "compactor", "--poll-interval", "0.2"],
                env={**os.environ, **env, "PYTHONPATH": str(REPO)}, cwd=REPO, stdout=log,
                stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(60)


@pytest.fixture
def services(tmp_path: Path, s3_url: str,
             postgres_url: str) -> Iterator[tuple[AgentProcess, int, CompactorProcess, int]]:
    """An agent and a compactor with metrics ports, on moto S3 + PostgreSQL, and the topics:
    `users` (compacted, 2 partitions) and `events` (delete policy)."""
    with MetadataStore.open(postgres_url, create=True) as md:
        md.create_topic("users", 2, {"cleanup.policy": "compact"})
        md.create_topic("events", 1)
    agent_port, compactor_port = free_port(), free_port()
    agent = AgentProcess(s3_url, postgres_url, tmp_path / "agent.log", {
        "SILT_AGENT_METRICS_LISTENERS": f"127.0.0.1:{agent_port}",
        "SILT_AGENT_METRICS_REFRESH_INTERVAL_MS": "200",
        "SILT_AGENT_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "SILT_AGENT_LINGER_MS": "300"}).start()
    # Two L0 files make a job, and only that: fresh L0 files (under an hour) weigh nothing in
    # a dirty ratio, so no other job is proposed. Replaced files wait the default 60 s.
    compactor = CompactorProcess(s3_url, postgres_url, tmp_path / "compactor.log", {
        "SILT_COMPACTOR_METRICS_LISTENERS": f"127.0.0.1:{compactor_port}",
        "SILT_PLANNER_L0_TRIGGER_FILES": "2", "SILT_PLANNER_L0_MAX_AGE_MS": "3600000"})
    try:
        wait_for("the compactor's /healthz", lambda: _answers(compactor_port), compactor.log)
        yield agent, agent_port, compactor, compactor_port
    finally:
        compactor.stop()
        agent.terminate()


def _answers(port: int) -> bool:
    try:
        return get(port, "/healthz")[0] == 200
    except OSError:
        return False


def produce_flush(producer: KafkaProducer, records: list[tuple[str, int, bytes, bytes | None]]
                  ) -> None:
    """Send as one request and wait for every ack: the agent committed them all, in one
    flush (nothing else is produced meanwhile; the producer lingers until `flush`)."""
    futures = [producer.send(topic, key=key, value=val, partition=p)
               for topic, p, key, val in records]
    producer.flush(timeout=30)
    for f in futures:
        f.get(timeout=30)


def keyed(version: bytes) -> list[tuple[str, int, bytes, bytes | None]]:
    return [("users", p, f"k{i}".encode(), version) for p in (0, 1) for i in range(KEYS)]


def test_dashboard_metrics_exist_with_the_traffic_they_count(
        services: tuple[AgentProcess, int, CompactorProcess, int], s3_url: str) -> None:
    agent, agent_port, compactor, compactor_port = services

    def logs() -> str:
        return f"--- agent\n{agent.log()}\n--- compactor\n{compactor.log()}"

    producer = KafkaProducer(bootstrap_servers=agent.bootstrap, acks="all", linger_ms=60_000)
    # Phase A, two flushes: every key twice (k0's second value a tombstone), some events.
    produce_flush(producer, [*keyed(b"v1"), ("events", 0, b"e", b"x")])
    produce_flush(producer, [(t, p, k, None if k == b"k0" else b"v2")
                             for t, p, k, _ in keyed(b"v2")])
    # A group reads it all (what is left of it if the compactor got there first) and commits.
    consumer = KafkaConsumer("users", bootstrap_servers=agent.bootstrap, group_id="dash",
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        ends = {TopicPartition("users", p): 2 * KEYS for p in (0, 1)}
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not (
                consumer.assignment() == set(ends)
                and all(consumer.position(tp) == end for tp, end in ends.items())):
            consumer.poll(500)
        assert consumer.assignment() == set(ends), logs()
        assert all(consumer.position(tp) == end for tp, end in ends.items()), logs()
        consumer.commit()
        # The compactor merges the two files: 2 * KEYS older values dropped.
        wait_for("a committed job", lambda: value(scrape(compactor_port),
                                                  "silt_compaction_jobs_total",
                                                  outcome="committed"), logs)
        # Phase B: one flush whose object is then deleted, one more: the job merging them
        # fails on the missing input, every round.
        produce_flush(producer, keyed(b"v3"))
        with MetadataStore.open(agent.metadata_url, create=True) as md:
            (lost,) = [f for f in md.snapshot().files if f.level == 0]
        bucket, prefix = s3_url.removeprefix("s3://").split("/", 1)
        boto3.client("s3").delete_object(Bucket=bucket, Key=f"{prefix}/{lost.object_key}")
        produce_flush(producer, keyed(b"v4"))
        producer.close()

        # The group has not read phase B: its lag is those records.
        wait_for("the group's lag", lambda: value(scrape(agent_port), "silt_consumer_group_lag",
                                                  group="dash", topic="users") == 4 * KEYS,
                 logs)
        a = scrape(agent_port)
        c = wait_for("a failed job and the backlog it left",
                     lambda: (s if (value(s := scrape(compactor_port),
                                          "silt_compaction_jobs_total", outcome="failed")
                                    and value(s, "silt_gc_backlog_files", state="retired"))
                              else None), logs)
    finally:
        consumer.close()

    missing = sorted(n for n in dashboard_metrics() if n not in a and n not in c)
    assert not missing, f"dashboard metrics not exported: {missing}"

    # The agent: what was produced, fetched, stored and committed.
    assert value(a, "silt_produce_records_total", topic="users") == 8 * KEYS
    assert value(a, "silt_produce_records_total", topic="events") == 1
    assert (value(a, "silt_produce_bytes_total", topic="users") or 0) > 0
    assert value(a, "silt_flush_duration_seconds_count") == 4
    assert value(a, "silt_flush_size_bytes_count") == 4
    assert (value(a, "silt_fetch_bytes_total", topic="users") or 0) > 0
    assert (value(a, "silt_connections_accepted_total") or 0) >= 1
    assert (value(a, "silt_requests_total", api="produce") or 0) >= 4
    assert (value(a, "silt_requests_total", api="join_group") or 0) >= 1
    assert value(a, "silt_objectstore_requests_total", type="PUT") == 4
    assert (value(a, "silt_objectstore_requests_total", type="GET") or 0) >= 1
    assert value(a, "silt_metadata_commit_duration_seconds_count", kind="files",
                 outcome="ok") == 4
    # The compactor: one job committed, the other failing on the deleted object's GET.
    assert value(c, "silt_compaction_jobs_total", outcome="committed") == 1
    assert value(c, "silt_compaction_records_dropped_total", reason="duplicate") == 2 * KEYS
    assert (value(c, "silt_compaction_bytes_total", direction="in") or 0) > 0
    assert (value(c, "silt_compaction_bytes_total", direction="out") or 0) > 0
    assert value(c, "silt_metadata_commit_duration_seconds_count", kind="compaction",
                 outcome="ok") == 1
    assert (value(c, "silt_objectstore_request_failures_total", type="GET",
                  error="FileNotFoundError") or 0) >= 1
    assert value(c, "silt_compaction_uncleanable_partitions", topic="users") == 2
    assert value(c, "silt_compaction_max_dirty_ratio", topic="users") is not None
    assert value(c, "silt_compaction_max_dirty_ratio", topic="events") is None
    assert value(c, "silt_gc_backlog_files", state="retired") == 2
    assert value(c, "silt_live_files", level="1") == 2  # compacted and delete-policy data

    for port in (agent_port, compactor_port):
        assert get(port, "/healthz") == (200, "ok\n")
        assert get(port, "/readyz") == (200, "ready\n")
        assert get(port, "/nothing")[0] == 404
