"""Consume path: Reader over a topic written by the agent (one ranged GET per segment)."""

from __future__ import annotations

import tempfile
import time
from typing import Any

from agent import Agent, AgentConfig, Reader
from metadata import MetadataStore
from objectstore import open_store


def run_consume(value_size: int, records: int, partitions: int = 100) -> dict[str, Any]:
    """Produce, then time reading every partition from offset 0."""
    with tempfile.TemporaryDirectory(prefix="silt-bench-") as tmp:
        md = MetadataStore.open(f"sqlite:///{tmp}/md.db")
        md.create_topic("bench", partitions)
        store = open_store(f"file://{tmp}/objects")
        value = b"x" * value_size
        with Agent(store, md, AgentConfig(linger_ms=60_000)) as agent:
            for i in range(records):
                agent.produce("bench", i % partitions, b"k%d" % i, value)
        reader = Reader(store, md)
        before = store.counters()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        n = sum(1 for p in range(partitions) for _ in reader.read("bench", p, 0))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        gets = (store.counters() - before).GET
        md.close()
    assert n == records
    payload = records * (value_size + 10)
    return {
        "benchmark": "consume",
        "value_bytes": value_size,
        "records": records,
        "partitions": partitions,
        "mib_per_s_per_core": round(payload / 2**20 / cpu, 1),
        "records_per_s_per_core": round(records / cpu),
        "wall_s": round(wall, 3),
        "gets": gets,
    }
