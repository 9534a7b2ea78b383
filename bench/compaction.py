"""Compaction benchmarks through the real code path (Agent -> files -> Compactor job).

Throughput is input bytes (and records) over the job's CPU seconds. Each compaction row
also has the floor measured in the same run on the same input objects: read them from the
same store (the page cache for file://), CRC32C them and write back as many bytes as the
job wrote, over that work's CPU seconds; the ratio is compaction over floor. Pass-1
memory is bench/memory.py.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import crc32c
import numpy as np

from agent import Agent, AgentConfig
from compactor import Compactor, CompactorConfig
from metadata import MetadataStore
from objectstore import ObjectStore, open_store

FLOOR_READ_SIZE = 1 << 20  # bytes per read() of the floor's input streams
FLOOR_KEY = "bench-floor/output"


def run_compaction(value_size: int, records: int, *, partitions: int = 100,
                   versions_per_key: int = 4, store_url: str | None = None) -> dict[str, Any]:
    """Produce `records` keyed records to a compacted topic (each key written
    `versions_per_key` times, updates spread over the run), then time one --all job."""
    keys_per_partition = max(1, records // partitions // versions_per_key)
    with tempfile.TemporaryDirectory(prefix="silt-bench-") as tmp:
        md = MetadataStore.open(f"sqlite:///{tmp}/md.db", create=True)
        md.create_topic("bench", partitions, {"cleanup.policy": "compact"})
        store = open_store(store_url or f"file://{tmp}/objects")
        value = os.urandom(value_size)
        keys = [b"key-%08d" % i for i in range(keys_per_partition)]
        # Random updates: most batches end up partly superseded (the expensive case).
        picks = np.random.default_rng(7).integers(0, keys_per_partition, size=records)
        with Agent(store, md, AgentConfig(linger_ms=60_000)) as agent:
            for i in range(records):
                agent.produce("bench", i % partitions, keys[picks[i]], value)
        inputs = [o.key for o in store.list()]  # only the agent's files so far
        comp = Compactor(store, md, CompactorConfig())
        cpu0, wall0 = time.process_time(), time.perf_counter()
        reports = comp.run_once(everything=True)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        r = reports[0]
        # Inputs stay in the store until the grace period: the floor reads the same bytes.
        assert len(inputs) == r.input_files, (inputs, r.input_files)  # the job took them all
        floor_bytes, floor_cpu = measure_floor(store, inputs, r.output_bytes)
        md.close()
    compaction_mb_s = r.input_bytes / 1e6 / cpu
    floor_mb_s = floor_bytes / 1e6 / floor_cpu
    return {
        "benchmark": "compaction",
        "partitions": partitions,
        "versions_per_key": versions_per_key,
        "value_bytes": value_size,
        "records_in": r.stats["records_in"],
        "records_out": r.stats["records_out"],
        "input_files": r.input_files,
        "input_mib": round(r.input_bytes / 2**20, 1),
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "output_mib": round(r.output_bytes / 2**20, 1),
        "input_mb_per_s_per_core": round(compaction_mb_s, 1),
        "floor_mb_per_s_per_core": round(floor_mb_s, 1),
        "ratio_to_floor": round(compaction_mb_s / floor_mb_s, 3),
        "records_per_s_per_core": round(r.stats["records_in"] / cpu),
        "bytes_read_over_input": round(r.bytes_read / max(r.input_bytes, 1), 4),
        "gets": r.requests.get("GET", 0),
        "batches_copied": r.stats["batches_copied"],
        "batches_reencoded": r.stats["batches_reencoded"],
    }


def measure_floor(store: ObjectStore, keys: list[str], output_bytes: int) -> tuple[int, float]:
    """(bytes read, CPU seconds) to read the objects `keys` from `store` as streams,
    CRC32C every byte and write `output_bytes` of them back to one new object (then
    deleted): the least work any compaction of those objects writing that much does."""
    crc, read = 0, 0
    cpu0 = time.process_time()
    with store.put_stream(FLOOR_KEY) as out:
        for key in keys:
            with store.open_stream(key) as stream:
                while chunk := stream.read(FLOOR_READ_SIZE):
                    read += len(chunk)
                    crc = crc32c.crc32c(chunk, crc)
                    share = min(len(chunk), output_bytes - out.bytes_written)
                    if share > 0:
                        out.write(chunk if share == len(chunk) else chunk[:share])
    cpu = time.process_time() - cpu0
    store.delete_many([FLOOR_KEY])
    assert out.bytes_written == output_bytes <= read, (out.bytes_written, output_bytes, read)
    return read, cpu
