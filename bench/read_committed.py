"""read_committed Fetch versus read_uncommitted on the same log, over the wire.

`python -m bench.read_committed [--plain] [--runs N]`: a log of `PARTITIONS` partitions of
1 KiB records written in process (`Agent.produce_batch`, the coordinator's path: each
transaction one batch of `BATCH` records in each of `PER_TXN` partitions, then its
markers; one in `ABORT_EVERY` aborted; `--plain`: the same batches, no transactions), then a
`silt agent` process and a confluent-kafka consumer assigned every partition from offset 0
reading to the end, alternating isolation.level read_uncommitted and read_committed `runs`
times. Figures: the agent's CPU seconds to serve the whole log, and the log's value bytes
per agent CPU second (the same denominator for both levels: read_committed delivers fewer
records, the aborted ones being dropped by the client).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder

from agent import Agent, AgentConfig
from fileformat.control import build_marker
from harness.agent_process import AgentProcess
from metadata import MetadataStore
from objectstore import open_store

TOPIC = "rc"
PARTITIONS = 20
BATCH = 100
PER_TXN = 4
TXNS = 500  # 500 x 4 x 100 = 200,000 records
ABORT_EVERY = 10
VALUE = 1024
MIB = 2**20


def _batch(pid: int, seq: int, transactional: bool) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional,
        producer_id=pid if transactional else -1, producer_epoch=0 if transactional else -1,
        base_sequence=seq if transactional else -1, batch_size=1 << 22)
    for i in range(BATCH):
        builder.append(i, timestamp=1_700_000_000_000, key=b"k%d" % i,
                       value=b"v" * VALUE, headers=[])
    return bytes(builder.build())


def write_log(store_url: str, md_url: str, plain: bool) -> int:
    """The log; returns the value bytes it holds."""
    md = MetadataStore.open(md_url, create=True)
    md.create_topic(TOPIC, PARTITIONS)
    agent = Agent(open_store(store_url), md, AgentConfig(linger_ms=60_000))
    pids = [md.allocate_producer_id() for _ in range(8)]
    futures = []
    seqs: dict[tuple[int, int], int] = {}  # a producer's sequences are per partition
    for t in range(TXNS):
        pid = pids[t % len(pids)]
        parts = [(t * PER_TXN + k) % PARTITIONS for k in range(PER_TXN)]
        for p in parts:
            futures.append(agent.produce_batch(TOPIC, p, _batch(pid, seqs.get((pid, p), 0),
                                                                not plain)))
            seqs[(pid, p)] = seqs.get((pid, p), 0) + BATCH
        if not plain:
            for p in parts:
                futures.append(agent.produce_batch(TOPIC, p, build_marker(
                    pid, 0, commit=t % ABORT_EVERY != 0, coordinator_epoch=0,
                    timestamp_ms=1_700_000_000_000), coordinator=True))
        if t % 50 == 49:
            agent.flush()
    agent.close()
    md.close()
    for f in futures:
        f.result()  # every batch stored
    return TXNS * PER_TXN * BATCH * VALUE


def fetch_all(agent: AgentProcess, isolation: str, md_url: str) -> tuple[float, int]:
    """Agent CPU seconds for a consumer to read every partition to its end, and the
    records it got."""
    md = MetadataStore.open(md_url)
    ends = {p.partition: p.last_stable_offset for p in md.partitions(TOPIC)}
    md.close()
    consumer = Consumer({"bootstrap.servers": agent.bootstrap, "group.id": "rc-bench",
                         "enable.auto.commit": False, "auto.offset.reset": "error",
                         "isolation.level": isolation, "enable.partition.eof": True})
    cpu0 = agent.cpu_seconds()
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    done: set[int] = set()
    got = 0
    deadline = time.monotonic() + 300
    try:
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF
                        part = msg.partition()
                        if part is not None and (msg.offset() or 0) >= ends[part]:
                            done.add(part)
                        continue
                    raise RuntimeError(str(err))
                got += 1
        if len(done) < PARTITIONS:
            raise RuntimeError(f"only {len(done)} partitions read to their end")
        return agent.cpu_seconds() - cpu0, got
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plain", action="store_true", help="no transactions in the log")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="silt-rc-") as tmp:
        store_url, md_url = f"file://{tmp}/objects", f"sqlite:///{tmp}/md.db"
        value_bytes = write_log(store_url, md_url, args.plain)
        agent = AgentProcess(store_url, md_url, Path(tmp) / "agent.log").start()
        rows: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
        got: dict[str, int] = {}
        try:
            for _ in range(args.runs):
                for level in rows:
                    cpu, got[level] = fetch_all(agent, level, md_url)
                    rows[level].append(cpu)
        finally:
            agent.terminate()
    out: dict[str, Any] = {"plain": args.plain, "records": TXNS * PER_TXN * BATCH}
    for level, cpus in rows.items():
        rates = [round(value_bytes / MIB / c, 1) for c in cpus]
        out[level] = {"records_delivered": got[level], "mib_per_s_per_agent_core": rates,
                      "median": statistics.median(rates),
                      "agent_cpu_s": [round(c, 2) for c in cpus]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
