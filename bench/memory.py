"""Pass-1 memory: the peak RSS of a worker process running pass 1 of a real merge.

Each shape runs in a fresh process (`python -m bench.memory RECORDS KEYS BUDGET`, JSON on
stdout): it serves one input file whose META section (one keyed chunk of RECORDS records
over KEYS keys) is generated block by block as `merge` reads it, so the input itself takes
no memory; it then resets the kernel's high-water mark (/proc/self/clear_refs) and runs
`compactor.merge.merge` with the default stream reader, offset map and hash spool. The
merge's `after_pass1` hook reads VmHWM and stops the job before pass 2 (there is no DATA).
The figure is that peak minus the RSS just before the merge: what pass 1 added, measured
by the kernel (numpy, the C map, the spool, Python objects alike), not by tracemalloc.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
from pyroaring import BitMap

from compactor.dedupe import DEFAULT_MEMORY_BUDGET, map_capacity
from compactor.merge import InputFile, OutputTarget, TopicPartition, merge
from fileformat import FLAG_KEYED, FileWriter, Readable, Sections
from fileformat.objectfile import ENTRY, ENTRY_CRC, OBJECT_HEADER_SIZE, TOMB_HEAD, TRAILER
from objectstore import ObjectStore, open_store
from planner import PartitionPlan

MIB = 1 << 20
GOAL_OVER_BUDGET = 32 * MIB  # the bound: budget + 32 MiB whatever the job's size
BLOCK = 1 << 16  # records generated at a time
TOPIC = "bench"
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray[Any, np.dtype[np.uint64]]) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """splitmix64's finaliser: distinct ids give distinct, random-looking words."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    out: np.ndarray[Any, np.dtype[np.uint64]] = x ^ (x >> np.uint64(31))
    return out


def key_hashes(ids: np.ndarray[Any, np.dtype[np.uint64]]) -> bytes:
    """16-byte stand-ins for keyed BLAKE2b hashes of keys `ids` (never all zero)."""
    words = np.empty((len(ids), 2), dtype=np.uint64)
    with np.errstate(over="ignore"):
        words[:, 0] = _mix(ids + np.uint64(1))
        words[:, 1] = _mix(ids ^ np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
    return words.tobytes()


class SyntheticMeta:
    """A Readable META section of one keyed chunk, generated as it is read."""

    def __init__(self, records: int, distinct_keys: int, data_len: int) -> None:
        self._parts = self._generate(records, distinct_keys, data_len)
        self._buf = b""

    @staticmethod
    def _generate(records: int, keys: int, data_len: int) -> Iterator[bytes]:
        head = entry_head(records, data_len)
        crc = crc32c.crc32c(head)
        yield head
        rng = np.random.default_rng(14)
        for start in range(0, records, BLOCK):
            n = min(BLOCK, records - start)
            ids = (np.arange(start, start + n, dtype=np.uint64) if records <= keys
                   else rng.integers(0, keys, size=n, dtype=np.uint64))
            block = key_hashes(ids)
            crc = crc32c.crc32c(block, crc)
            yield block
        tail = ENTRY_CRC.pack(crc)
        yield tail
        # The trailer's CRC covers every byte of the entries: here, head + hashes + crc.
        yield TRAILER.pack(1, crc32c.crc32c(tail, crc))

    def read(self, n: int, /) -> bytes:
        while len(self._buf) < n:
            part = next(self._parts, None)
            if part is None:
                break
            self._buf = self._buf + part if self._buf else part
        out, self._buf = self._buf[:n], self._buf[n:]
        return out


def entry_head(records: int, data_len: int) -> bytes:
    """The META entry of the chunk up to its key hashes (fixed part, topic, bitmaps)."""
    topic = TOPIC.encode()
    offsets = BitMap(range(records))
    offsets.run_optimize()
    offsets_raw = offsets.serialize()
    empty = BitMap().serialize()
    tombs = TOMB_HEAD.pack(len(empty)) + empty
    head_len = ENTRY.size + len(topic) + len(offsets_raw) + len(tombs)
    size = head_len + 16 * records + ENTRY_CRC.size
    fixed = ENTRY.pack(size, 0, 0, OBJECT_HEADER_SIZE, data_len, head_len, records,
                       max(1, records // 1000), records, records, 0, 0, 0, FLAG_KEYED,
                       len(topic), len(offsets_raw), len(tombs))
    return fixed + topic + offsets_raw + tombs


def meta_length(records: int, data_len: int) -> int:
    """Bytes of SyntheticMeta's section."""
    return len(entry_head(records, data_len)) + 16 * records + ENTRY_CRC.size + TRAILER.size


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


class _Done(Exception):
    """Raised by the after_pass1 hook: pass 1 is what is measured."""


def measure(records: int, distinct_keys: int, budget: int) -> dict[str, Any]:
    """Pass 1 of one merge in this process; its peak RSS growth (run it in a fresh one)."""
    data_len = records  # any length: pass 2 never reads it
    f = InputFile(1, "synthetic", Sections(OBJECT_HEADER_SIZE, data_len,
                                           OBJECT_HEADER_SIZE + data_len,
                                           meta_length(records, data_len)),
                  {(TOPIC, 0): (0, records - 1, None)})
    meta = SyntheticMeta(records, distinct_keys, data_len)

    def open_input(store: ObjectStore, f: InputFile, stack: ExitStack) -> tuple[Readable,
                                                                               Readable]:
        return meta, SyntheticMeta(0, 1, 0)  # DATA: never read

    peak: list[int] = []

    def after_pass1(tp: TopicPartition) -> None:
        peak.append(_status_kib("VmHWM"))
        raise _Done

    def out() -> OutputTarget:
        return OutputTarget(FileWriter(lambda b: None))

    store = open_store("memory://bench")
    plan = PartitionPlan(TOPIC, 0, whole_log=True, clean_upto_offset=2**62,
                         delete_retention_ms=0)
    try:  # the high-water mark from here on (Linux >= 4.0); else the process's whole life
        Path("/proc/self/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    base = _status_kib("VmRSS")
    cpu0 = time.process_time()
    with suppress(_Done):
        merge(store, [f], [plan], compacted_out=out, delete_out=out, now_ms=0,
              memory_budget=budget, open_input=open_input, after_pass1=after_pass1)
    cpu = time.process_time() - cpu0
    grown = (peak[0] - base) * 1024
    return {
        "benchmark": "dedupe_memory",
        "records": records,
        "distinct_keys": distinct_keys,
        "budget_mib": budget // MIB,
        "keys_in_map": min(distinct_keys, map_capacity(budget)),
        "partial_clean": distinct_keys > map_capacity(budget),
        "baseline_rss_mib": round(base / 1024, 1),
        "peak_growth_mib": round(grown / MIB, 1),
        "goal_mib": (budget + GOAL_OVER_BUDGET) // MIB,
        "within_goal": grown <= budget + GOAL_OVER_BUDGET,
        "peak_bytes_per_record": round(grown / records, 2),
        "peak_bytes_per_key": round(grown / distinct_keys, 1),
        "hwm_reset": reset,
        "cpu_s": round(cpu, 3),
        "records_per_s": round(records / cpu),
    }


def run_dedupe_memory(records: int, distinct_keys: int,
                      budget: int = DEFAULT_MEMORY_BUDGET) -> dict[str, Any]:
    """`measure` in a fresh worker process (its RSS is not this one's)."""
    proc = subprocess.run([sys.executable, "-m", "bench.memory", str(records),
                           str(distinct_keys), str(budget)],
                          check=True, capture_output=True, text=True, env=os.environ.copy())
    row: dict[str, Any] = json.loads(proc.stdout)
    return row


if __name__ == "__main__":
    r, k, b = (int(a) for a in sys.argv[1:4])
    print(json.dumps(measure(r, k, b)))
