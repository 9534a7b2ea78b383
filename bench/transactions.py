"""Transactions against one `silt agent` process (issue 24's figures), file:// store, the
agent's default flush (250 ms or 8 MiB).

- latency: one confluent-kafka transactional producer running transactions one after the
  other, each 10 records over 4 partitions: the records are flushed (acked), then
  commit_transaction is timed (EndTxn: the PrepareCommit store, the markers' flush, its
  commit completing the transaction); p50/p99 of that, and of the whole transaction.
- throughput: `producers` client threads, each with its own transactional id, running such
  transactions for `seconds`: transactions/s wall and per agent core (the agent's CPU
  seconds from /proc).
- cost: over `counted` sequential transactions, the objects the agent wrote (one PUT each:
  files in the store) and the metadata rows it wrote, by table (bench/groups.py's row
  triggers), per transaction.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from harness.agent_process import AgentProcess
from metadata import MetadataStore

from .groups import _by_table, _install_write_counters, _take_writes

TOPIC = "txn"
PARTITIONS = 4
RECORDS = 10


@dataclass(frozen=True)
class TransactionsParams:
    """Sizes of one run of the suite."""

    transactions: int  # sequential, for the latencies
    producers: int  # concurrent, for the throughput
    seconds: float
    counted: int  # sequential, for the PUTs and rows


def _producer(agent: AgentProcess, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": agent.bootstrap, "transactional.id": txn_id,
                  "linger.ms": 5})
    p.init_transactions(60)
    return p


def _one(p: Producer) -> tuple[float, float]:
    """One transaction: (EndTxn seconds, whole transaction seconds)."""
    started = time.perf_counter()
    p.begin_transaction()
    for i in range(RECORDS):
        p.produce(TOPIC, value=b"v" * 100, key=b"k%d" % i, partition=i % PARTITIONS)
    p.flush(60)
    ending = time.perf_counter()
    p.commit_transaction(60)
    done = time.perf_counter()
    return done - ending, done - started


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_latency(agent: AgentProcess, n: int) -> dict[str, Any]:
    p = _producer(agent, "bench-latency")
    try:
        times = [_one(p) for _ in range(n)]
    finally:
        p.flush(10)
    ends = [e * 1000 for e, _ in times]
    whole = [w * 1000 for _, w in times]
    return {"measure": "latency", "transactions": n,
            "end_txn_ms_p50": round(statistics.median(ends), 1),
            "end_txn_ms_p99": round(_pct(ends, 0.99), 1),
            "txn_ms_p50": round(statistics.median(whole), 1),
            "txn_ms_p99": round(_pct(whole, 0.99), 1)}


def run_throughput(agent: AgentProcess, producers: int, seconds: float) -> dict[str, Any]:
    clients = [_producer(agent, f"bench-tp-{i}") for i in range(producers)]
    counts = [0] * producers
    errors: list[BaseException] = []
    start = threading.Barrier(producers + 1)
    stop = threading.Event()

    def loop(i: int) -> None:
        start.wait()
        try:
            while not stop.is_set():
                _one(clients[i])
                counts[i] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(producers)]
    for t in threads:
        t.start()
    start.wait()
    cpu0, wall0 = agent.cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    cpu, wall = agent.cpu_seconds() - cpu0, time.perf_counter() - wall0
    if errors:
        raise RuntimeError(f"a transactional producer failed: {errors[0]}")
    n = sum(counts)
    return {"measure": "throughput", "producers": producers, "transactions": n,
            "agent_cpu_s": round(cpu, 2), "txn_per_s_wall": round(n / wall, 1),
            "txn_per_s_per_agent_core": round(n / cpu, 1) if cpu else None}


def _objects(store_dir: Path) -> int:
    return sum(1 for f in store_dir.rglob("*") if f.is_file() and "_silt" not in f.parts)


def run_cost(agent: AgentProcess, store_dir: Path, md_url: str, n: int) -> dict[str, Any]:
    engine = _install_write_counters(md_url)
    p = _producer(agent, "bench-cost")
    try:
        _one(p)  # the id's first transaction (its lease and row) is not counted
        _take_writes(engine)
        before = _objects(store_dir)
        for _ in range(n):
            _one(p)
        writes = _take_writes(engine)
        puts = _objects(store_dir) - before
    finally:
        p.flush(10)
        engine.dispose()
    return {"measure": "cost", "transactions": n, "puts_per_txn": round(puts / n, 2),
            "rows_per_txn": round(sum(writes.values()) / n, 1),
            "rows_by_table_per_txn": ", ".join(
                f"{t} {c / n:.2f}" for t, c in sorted(writes.items())),
            "rows": _by_table(writes)}


def run_transactions_on(md_url: str, tmp: Path, p: TransactionsParams) -> list[dict[str, Any]]:
    md = MetadataStore.open(md_url, create=True)
    md.create_topic(TOPIC, PARTITIONS)
    md.close()
    agent = AgentProcess(f"file://{tmp}/objects", md_url, tmp / "agent.log")
    agent.start()
    try:
        rows = [run_latency(agent, p.transactions),
                run_throughput(agent, p.producers, p.seconds),
                run_cost(agent, tmp / "objects", md_url, p.counted)]
    finally:
        agent.terminate()
    metadata = "postgresql" if md_url.startswith("postgresql") else "sqlite"
    return [{"benchmark": "transactions", "metadata": metadata, **row} for row in rows]


def run_transactions(p: TransactionsParams, postgres_url: str | None = None
                     ) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="silt-txn-") as tmp:
        rows += run_transactions_on(f"sqlite:///{tmp}/md.db", Path(tmp), p)
    if postgres_url is not None:
        with tempfile.TemporaryDirectory(prefix="silt-txn-") as tmp:
            rows += run_transactions_on(postgres_url, Path(tmp), p)
    return rows
