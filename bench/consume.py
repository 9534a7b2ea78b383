"""Consume path: Reader over a topic written by the agent (one ranged GET per segment),
as records (`read`: every record decoded) or as stored batches (`read_batches`: views of
the GET, nothing decoded)."""

from __future__ import annotations

import tempfile
import time
from typing import Any

from agent import Agent, AgentConfig, Reader
from fileformat.batch import RECORD_COUNT_POS
from metadata import MetadataStore
from objectstore import open_store

METHODS = ("read", "read_batches")


def run_consume(value_size: int, records: int, partitions: int = 100) -> list[dict[str, Any]]:
    """Produce, then time reading every partition from offset 0, once per method."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="silt-bench-") as tmp:
        md = MetadataStore.open(f"sqlite:///{tmp}/md.db", create=True)
        md.create_topic("bench", partitions)
        store = open_store(f"file://{tmp}/objects")
        value = b"x" * value_size
        with Agent(store, md, AgentConfig(linger_ms=60_000)) as agent:
            for i in range(records):
                agent.produce("bench", i % partitions, b"k%d" % i, value)
        reader = Reader(store, md)
        for method in METHODS:
            before = store.counters()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            if method == "read":
                n = sum(1 for p in range(partitions) for _ in reader.read("bench", p, 0))
            else:  # records counted from the batch headers, not decoded
                n = sum(int.from_bytes(b[RECORD_COUNT_POS:RECORD_COUNT_POS + 4], "big")
                        for p in range(partitions)
                        for b in reader.read_batches("bench", p, 0))
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            gets = (store.counters() - before).GET
            assert n == records, (method, n)
            payload = records * (value_size + 10)
            rows.append({
                "benchmark": "consume",
                "method": method,
                "value_bytes": value_size,
                "records": records,
                "partitions": partitions,
                "mib_per_s_per_core": round(payload / 2**20 / cpu, 1),
                "records_per_s_per_core": round(records / cpu),
                "wall_s": round(wall, 3),
                "gets": gets,
            })
        md.close()
    return rows
