"""produce -> compact -> consume against LocalStack, and the two-GETs-per-file claim
checked against LocalStack's own request log."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest

from agent import Agent, AgentConfig, Reader
from compactor import Compactor
from costs import PRICE_TABLES, Workload, run_costs
from metadata import MetadataStore
from objectstore import open_store

if TYPE_CHECKING:
    from tests.localstack.conftest import LocalStack



pytestmark = pytest.mark.localstack


@pytest.fixture
def aws_env(localstack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", localstack.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = f"silt-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=localstack.endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/silt"


def _settle(ls: LocalStack, op: str) -> int:
    """LocalStack writes its log line just after answering: wait until the count is stable."""
    last = -1
    for _ in range(20):
        now = ls.count(op)
        if now == last:
            return now
        last = now
        time.sleep(0.1)
    return last


def test_produce_compact_consume_two_gets_per_file(
    localstack: LocalStack, aws_env: str, tmp_path: Path
) -> None:
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("state", 20, {"cleanup.policy": "compact"})
    md.create_topic("events", 20)
    store = open_store(aws_env)
    latest: dict[tuple[int, bytes], bytes] = {}
    for rnd in range(3):
        with Agent(store, md, AgentConfig(linger_ms=60_000)) as agent:
            for i in range(400):
                key = b"k%d" % (i % 25)
                agent.produce("state", i % 20, key, b"v%d-%d" % (rnd, i))
                latest[(i % 20, key)] = b"v%d-%d" % (rnd, i)
                agent.produce("events", i % 20, None, b"e")
    files = md.stats().as_dict()["levels"][0]["files"]
    gets_before = _settle(localstack, "GetObject")
    client_before = store.counters()
    (report,) = Compactor(store, md).run_once(everything=True)
    assert report.outcome == "committed" and report.input_files == files == 3
    assert _settle(localstack, "GetObject") - gets_before == 2 * files
    assert 2 * files == (store.counters() - client_before).GET
    reader = Reader(store, md)
    got = {(p, r.key): r.value for p in range(20) for r in reader.read("state", p, 0)}
    assert got == latest
    assert sum(1 for p in range(20) for _ in reader.read("events", p, 0)) == 3 * 400
    md.close()


def test_costs_same_counts_as_on_moto(localstack: LocalStack, aws_env: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    w = Workload(partitions=(1, 20), files_per_round=2, rounds=1)
    prices = PRICE_TABLES["s3-standard"]
    on_localstack = run_costs(w, prices)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    on_moto = run_costs(w, prices)
    assert [r.client for r in on_localstack] == [r.client for r in on_moto]
    assert all(r.server == r.client for r in on_moto)
