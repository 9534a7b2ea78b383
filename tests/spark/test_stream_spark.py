"""Structured Streaming end to end: readStream.format("silt") into writeStream.format("silt")
with Trigger.AvailableNow and processing-time triggers, restarts from the checkpoint, a
replayed batch id, and a driver SIGKILLed mid-query while a Kafka client produces through a
real `silt agent` and compaction runs: every input record in the sink topic exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.sql.datasource import WriterCommitMessage

from agent import Agent, AgentConfig, Reader
from agent.errors import NullKeyError
from clock import ManualClock
from compactor import Compactor
from harness.agent_process import AgentProcess
from metadata import MetadataStore
from objectstore import open_store
from spark.sink import SiltStreamWriter

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
APP_TIMEOUT_S = 600


def _urls(root: Path) -> tuple[str, str]:
    return f"file://{root}/objects", f"sqlite:///{root}/md.db"


def _produce(store_url: str, md_url: str, topic: str, per_partition: int, tag: str) -> None:
    md = MetadataStore.open(md_url, create=True)
    n = md.get_topic(topic).partitions
    with Agent(open_store(store_url), md, AgentConfig(linger_ms=60_000),
               clock=ManualClock()) as a:
        for p in range(n):
            for i in range(per_partition):
                a.produce(topic, p, b"k%d" % i, f"{tag}-{p}-{i}".encode())
    md.close()


def _records(store_url: str, md_url: str, topic: str) -> list[Any]:
    md = MetadataStore.open(md_url)
    try:
        r = Reader(open_store(store_url), md)
        return [x for p in range(md.get_topic(topic).partitions) for x in r.read(topic, p, 0)]
    finally:
        md.close()


def test_available_now_into_the_sink_then_restart(spark: Any, tmp_path: Path) -> None:
    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("in", 3)
    md.create_topic("out", 3)
    md.close()
    _produce(store_url, md_url, "in", 30, "a")
    checkpoint = str(tmp_path / "checkpoint")
    opts = {"store": store_url, "metadata": md_url}

    def run() -> list[int]:
        rows = (spark.readStream.format("silt")
                .options(topic="in", startingOffsets="earliest", maxOffsetsPerTrigger="50",
                         **opts).load())
        query = (rows.select("key", "value", "partition").writeStream.format("silt")
                 .options(topic="out", queryId=checkpoint, checkpointLocation=checkpoint, **opts)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    assert run() == [48, 42]  # 90 records, at most 50 per batch: 16 per partition (floor)
    _produce(store_url, md_url, "in", 10, "b")
    assert run() == [30]  # the restart resumes where the checkpoint ended
    source = _records(store_url, md_url, "in")
    sink = _records(store_url, md_url, "out")
    assert len(sink) == len(source) == 120
    # Per partition, in offset order, the same keys and values: exactly once.
    by_partition = Counter((x.partition, x.key, x.value) for x in sink)
    assert by_partition == Counter((x.partition, x.key, x.value) for x in source)
    md = MetadataStore.open(md_url)
    assert md.last_sink_batch(checkpoint) == 2  # batches 0, 1, then 2 after the restart
    md.close()


def test_replayed_batch_commits_nothing_twice(tmp_path: Path) -> None:
    """What Spark does after a driver failure between the sink's commit and its own
    record of it: the same batch id again, its rows written again by new tasks."""
    from pyspark.sql.types import StructType

    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("out", 2)
    md.create_topic("keyed", 1, {"cleanup.policy": "compact"})
    schema = StructType.fromJson({"type": "struct", "fields": [
        {"name": n, "type": t, "nullable": True, "metadata": {}}
        for n, t in (("key", "binary"), ("value", "binary"), ("partition", "integer"))]})
    sink = SiltStreamWriter({"topic": "out", "store": store_url, "metadata": md_url,
                             "queryId": "/cp/q1"}, schema)
    rows = [Row(key=b"k%d" % i, value=b"v%d" % i, partition=i % 2) for i in range(10)]

    def batch(batch_id: int) -> None:
        half: list[WriterCommitMessage | None] = [sink.write(iter(rows[:5])),
                                                   sink.write(iter(rows[5:]))]
        sink.commit(half, batch_id)

    batch(0)
    batch(0)  # the replay
    assert sorted(x.value for x in _records(store_url, md_url, "out")) == sorted(
        r.value for r in rows)
    assert md.last_sink_batch("/cp/q1") == 0
    assert sum(1 for f in md.files_to_gc(2**62) if f.state == "abandoned") == 2
    batch(1)
    assert len(_records(store_url, md_url, "out")) == 20
    sink.commit([], 2)  # an empty batch is recorded too
    assert md.last_sink_batch("/cp/q1") == 2
    with pytest.raises(ValueError, match="queryId"):
        SiltStreamWriter({"topic": "out", "store": store_url, "metadata": md_url}, schema)
    keyed = SiltStreamWriter({"topic": "keyed", "store": store_url, "metadata": md_url,
                              "queryId": "q2"}, schema)
    with pytest.raises(NullKeyError):
        keyed.write(iter([Row(key=None, value=b"v", partition=0)]))
    md.close()


def _app(master: str, store_url: str, md_url: str, checkpoint: str, trigger: str,
         **popen: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        ["nice", sys.executable, "-m", "tests.spark.stream_app", master, store_url, md_url,
         "in", "out", checkpoint, trigger], env=env, cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


@pytest.mark.chaos
def test_driver_killed_mid_query_resumes_exactly_once(
        tmp_path: Path, s3_url: str, postgres_url: str) -> None:
    """The driver SIGKILLed mid-query while records arrive and compaction runs, then
    restarted: every source record exactly once in the sink. Two Spark drivers, ~2-3
    minutes of both cores here: `make chaos` runs it; `make test` keeps the restart from
    the checkpoint (test_available_now_into_the_sink_then_restart)."""
    from confluent_kafka import Producer

    md = MetadataStore.open(postgres_url, create=True)
    md.create_topic("in", 4)
    md.create_topic("out", 4)
    agent = AgentProcess(s3_url, postgres_url, tmp_path / "agent.log").start()
    checkpoint = str(tmp_path / "checkpoint")
    total = 1200
    produced = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": agent.bootstrap, "linger.ms": 20})
        for i in range(total):
            p.produce("in", key=b"k%d" % (i % 50), value=b"v%d" % i)
            if i % 100 == 99:
                p.flush(30)
                time.sleep(0.3)
        assert p.flush(30) == 0
        produced.set()

    producer = threading.Thread(target=produce)
    app = _app("local[2]", s3_url, postgres_url, checkpoint, "500 milliseconds")
    try:
        producer.start()
        compactor = Compactor(open_store(s3_url), md)
        deadline = time.monotonic() + APP_TIMEOUT_S
        # Compaction (and GC of its inputs at once) while the query runs, until the sink
        # has committed two batches with rows; then the driver dies without warning.
        while (md.last_sink_batch(checkpoint) or 0) < 2 or not _records(
                s3_url, postgres_url, "out"):
            assert app.poll() is None, app.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            compactor.run_once(everything=True)
            compactor.collect_garbage(grace_ms=0)
            time.sleep(0.5)
        app.kill()
        app.communicate()
        producer.join(120)
        assert produced.is_set()
        compactor.run_once(everything=True)
        # The restart resumes from the checkpoint (replaying the batch the kill cut short,
        # if any) and, with Trigger.AvailableNow, stops once it has read everything.
        again = _app("local[2]", s3_url, postgres_url, checkpoint, "availableNow")
        out, err = again.communicate(timeout=APP_TIMEOUT_S)
        assert again.returncode == 0, err[-3000:]
        assert any(line.startswith("batch ") for line in out.splitlines())
    finally:
        if app.poll() is None:
            app.kill()
            app.communicate()
        agent.terminate()
    source = _records(s3_url, postgres_url, "in")
    sink = _records(s3_url, postgres_url, "out")
    assert len(source) == total
    srcs = Counter(dict(x.headers)["src"] for x in sink)
    assert all(n == 1 for n in srcs.values())  # no source offset twice...
    assert set(srcs) == {b"%d:%d" % (x.partition, x.offset) for x in source}  # ...none skipped
    assert sorted(x.value for x in sink) == sorted(x.value for x in source)
    md.close()
