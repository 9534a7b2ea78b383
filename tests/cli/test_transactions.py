"""`silt transactions list|describe`, against the metadata store directly, on both metadata
backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from metadata import MetadataStore, TransactionRecord
from metadata.models import TXN_EMPTY, TXN_ONGOING
from tests.cli.test_groups import run


@pytest.fixture
def env(metadata_url: str, tmp_path: Path) -> dict[str, str]:
    return {"SILT_STORE": f"file://{tmp_path}/objects", "SILT_METADATA": metadata_url}


@pytest.fixture
def md(env: dict[str, str]) -> Iterator[MetadataStore]:
    """Transactional ids "app-1" (Ongoing on t-0 and t-1, coordinated by live agent a1) and
    "idle" (Empty, its coordinator gone)."""
    store = MetadataStore.open(env["SILT_METADATA"], create=True)
    store.create_topic("t", 2)
    store.register_agent("a1", "h1", 9092)
    now = store.clock.now_ms()
    store.store_transaction(store.acquire_transaction("app-1", "a1"), TransactionRecord(
        "app-1", 7, 2, -1, -1, TXN_ONGOING, (("t", 0), ("t", 1)), ("g",), 60_000,
        now - 5_000, now))
    store.register_agent("a2", "h2", 9093)
    store.store_transaction(store.acquire_transaction("idle", "a2"), TransactionRecord(
        "idle", 8, 0, -1, -1, TXN_EMPTY, (), (), 60_000, -1, now))
    store.deregister_agent("a2")
    yield store
    store.close()


def test_list(md: MetadataStore, env: dict[str, str]) -> None:
    code, out, _ = run(["transactions", "list", "--json"], env)
    assert code == 0
    assert json.loads(out) == [
        {"transactional_id": "app-1", "coordinator": "a1", "producer_id": 7,
         "state": "Ongoing"},
        {"transactional_id": "idle", "coordinator": None, "producer_id": 8, "state": "Empty"}]
    code, out, _ = run(["transactions", "list"], env)
    assert code == 0 and out.splitlines()[1].split() == ["app-1", "a1", "7", "Ongoing"]


def test_describe(md: MetadataStore, env: dict[str, str]) -> None:
    code, out, _ = run(["transactions", "describe", "app-1", "--json"], env)
    assert code == 0
    row = json.loads(out)
    assert (row["producer_epoch"], row["state"], row["timeout_ms"]) == (2, "Ongoing", 60_000)
    assert row["duration_ms"] >= 5_000 and row["groups"] == ["g"]
    assert row["partitions"] == [{"topic": "t", "partition": 0},
                                 {"topic": "t", "partition": 1}]
    code, out, _ = run(["transactions", "describe", "idle"], env)
    assert code == 0 and "Empty" in out.splitlines()[1]
    code, _, err = run(["transactions", "describe", "nope"], env)
    assert code == 1 and "does not exist" in err
