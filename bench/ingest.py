"""Agent ingest through the real code path: Agent -> object store -> metadata commit.

Reports MiB/s and records/s per core (bytes over the process's CPU seconds, which on this
2-core machine is what one core delivers), PUTs per flush and produce-to-ack latency.

Two entry points of the agent are measured: `produce` (one record per call, encoded by the
agent) and `produce_batch` (client-encoded RecordBatch v2 of `batch_records` records, as a
Kafka producer sends them with batch.size 16 KiB; stored byte for byte after a CRC check).
The client batches are built before the clock starts: that work is the client's. The
garbage collector is tuned as the `silt` command tunes it (`agent.tune_gc`), and restored
after the run.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from agent import Agent, AgentConfig, tune_gc
from agent.producer import ProduceFuture
from fileformat.encoder import build_batch
from metadata import MetadataStore
from objectstore import open_store


@dataclass(frozen=True)
class IngestParams:
    """One ingest run."""

    store: str  # "file" or an s3:// URL
    value_size: int
    records: int
    partitions: int = 1000
    api: str = "produce"  # or "produce_batch"
    batch_records: int = 16


def run_ingest(p: IngestParams) -> dict[str, Any]:
    """Produce `records` records of `value_size` bytes round robin over `partitions`."""
    thresholds = gc.get_threshold()
    tune_gc()
    try:
        return _run_ingest(p)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _run_ingest(p: IngestParams) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="silt-bench-") as tmp:
        store_url = f"file://{tmp}/objects" if p.store == "file" else p.store
        md = MetadataStore.open(f"sqlite:///{tmp}/md.db", create=True)
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

        nkeys = len(keys)
        batches: list[bytes] = []
        if p.api == "produce_batch":
            now = int(time.time() * 1000)
            per = p.batch_records
            for b in range(p.records // per):
                batches.append(build_batch([
                    (j, now, keys[(b * per + j) % nkeys], value, ()) for j in range(per)]))
        before = store.counters()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        with Agent(store, md, AgentConfig()) as agent:
            if batches:
                for i, raw in enumerate(batches):
                    fut = agent.produce_batch("bench", i % p.partitions, raw)
                    if i % 7 == 0:
                        sent[i] = time.perf_counter()
                        fut.add_done_callback(acked(i))
            else:
                for i in range(p.records):
                    fut = agent.produce("bench", i % p.partitions, keys[i % nkeys], value)
                    if i % 97 == 0:  # sample latencies without perturbing the hot loop much
                        sent[i] = time.perf_counter()
                        fut.add_done_callback(acked(i))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        used = (store.counters() - before).as_dict()
        flushes = agent.totals.flushes
        md.close()
    records = len(batches) * p.batch_records if batches else p.records
    payload = records * (p.value_size + 12)
    lat = sorted(latencies)
    return {
        "benchmark": "ingest",
        "store": "file" if p.store == "file" else "s3 (moto server, separate process)",
        "api": p.api,
        "value_bytes": p.value_size,
        "records": records,
        "partitions": p.partitions,
        "payload_mib": round(payload / 2**20, 1),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "mib_per_s_per_core": round(payload / 2**20 / cpu, 1),
        "records_per_s_per_core": round(records / cpu),
        "mib_per_s_wall": round(payload / 2**20 / wall, 1),
        "flushes": flushes,
        "put_requests_per_flush": round(
            (used.get("PUT", 0) + used.get("UploadPart", 0) + used.get("CreateMultipartUpload", 0)
             + used.get("CompleteMultipartUpload", 0)) / max(flushes, 1), 2),
        "latency_ms_p50": round(statistics.median(lat) * 1000, 1) if lat else None,
        "latency_ms_p99": round(lat[int(len(lat) * 0.99) - 1] * 1000, 1) if lat else None,
    }
