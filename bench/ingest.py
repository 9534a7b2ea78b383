"""Agent ingest through the real code path: Agent -> object store -> metadata commit.

Reports MiB/s and records/s per core (bytes over the process's CPU seconds, which on this
2-core machine is what one core delivers), PUTs per flush and produce-to-ack latency.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from agent import Agent, AgentConfig
from agent.producer import ProduceFuture
from metadata import MetadataStore
from objectstore import open_store


@dataclass(frozen=True)
class IngestParams:
    """One ingest run."""

    store: str  # "file" or an s3:// URL
    value_size: int
    records: int
    partitions: int = 1000


def run_ingest(p: IngestParams) -> dict[str, Any]:
    """Produce `records` records of `value_size` bytes round robin over `partitions`."""
    with tempfile.TemporaryDirectory(prefix="silt-bench-") as tmp:
        store_url = f"file://{tmp}/objects" if p.store == "file" else p.store
        md = MetadataStore.open(f"sqlite:///{tmp}/md.db")
        md.create_topic("bench", p.partitions)
        store = open_store(store_url)
        value = b"x" * p.value_size
        keys = [b"key-%08d" % i for i in range(min(p.records, 100_000))]
        sent: dict[int, float] = {}
        latencies: list[float] = []

        def acked(i: int) -> Any:
            def cb(_: ProduceFuture) -> None:
                latencies.append(time.perf_counter() - sent[i])

            return cb

        before = store.counters()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        with Agent(store, md, AgentConfig()) as agent:
            nkeys = len(keys)
            for i in range(p.records):
                fut = agent.produce("bench", i % p.partitions, keys[i % nkeys], value)
                if i % 97 == 0:  # sample latencies without perturbing the hot loop much
                    sent[i] = time.perf_counter()
                    fut.add_done_callback(acked(i))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        used = (store.counters() - before).as_dict()
        flushes = len(agent.reports)
        md.close()
    payload = p.records * (p.value_size + 12)
    lat = sorted(latencies)
    return {
        "benchmark": "ingest",
        "store": "file" if p.store == "file" else "s3 (moto server, separate process)",
        "value_bytes": p.value_size,
        "records": p.records,
        "partitions": p.partitions,
        "payload_mib": round(payload / 2**20, 1),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "mib_per_s_per_core": round(payload / 2**20 / cpu, 1),
        "records_per_s_per_core": round(p.records / cpu),
        "mib_per_s_wall": round(payload / 2**20 / wall, 1),
        "flushes": flushes,
        "put_requests_per_flush": round(
            (used.get("PUT", 0) + used.get("UploadPart", 0) + used.get("CreateMultipartUpload", 0)
             + used.get("CompleteMultipartUpload", 0)) / max(flushes, 1), 2),
        "latency_ms_p50": round(statistics.median(lat) * 1000, 1) if lat else None,
        "latency_ms_p99": round(lat[int(len(lat) * 0.99) - 1] * 1000, 1) if lat else None,
    }
