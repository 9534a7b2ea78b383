"""Structured Streaming: readStream.format("silt") and writeStream.format("silt") on one
executor core (local[1]), file:// store and SQLite metadata.

- source: a topic read to Spark's `noop` sink with Trigger.AvailableNow, in micro-batches of
  `maxOffsetsPerTrigger`; its time is the batches' `addBatch` (the tasks' reading).
- sink: the same reads into writeStream.format("silt"); the sink's time is the difference
  of the two runs' `addBatch`.
- GETs per micro-batch: each batch's plan (`partitions(start, end)` of its logged offsets)
  counted: one ranged GET per run of wanted segments of an object.
- end-to-end latency at the default trigger (micro-batches back to back): a record handed to
  an agent (default linger, 250 ms) until it can be read from the sink topic.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from typing import Any

from agent import Agent, AgentConfig, Reader
from metadata import MetadataStore
from objectstore import open_store

TOPIC_PARTITIONS = 16
LATENCY_POLL_S = 0.01


def _options(tmp: str) -> dict[str, str]:
    return {"store": f"file://{tmp}/objects", "metadata": f"sqlite:///{tmp}/md.db"}


def _run(spark: Any, opts: dict[str, str], sink: str, checkpoint: str,
         per_trigger: int) -> list[dict[str, Any]]:
    rows = (spark.readStream.format("silt")
            .options(topic="in", startingOffsets="earliest",
                     maxOffsetsPerTrigger=str(per_trigger), **opts).load())
    writer = rows.select("key", "value", "partition").writeStream.format(sink)
    if sink == "silt":
        writer = writer.options(topic="out", queryId=checkpoint, **opts)
    query = (writer.option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return [p for p in query.recentProgress if p["numInputRows"]]


def _gets_per_batch(opts: dict[str, str], progress: list[dict[str, Any]]) -> list[int]:
    from spark.reading import ReadTask
    from spark.stream import SiltStreamReader, StreamOptions

    reader = SiltStreamReader(StreamOptions.parse({"topic": "in",
                                                   "startingOffsets": "earliest", **opts}))
    try:
        out = []
        for p in progress:
            (source,) = p["sources"]
            start = json.loads(source["startOffset"] or "null") or reader.initialOffset()
            tasks = reader.partitions(start, json.loads(source["endOffset"]))
            out.append(sum(len(t.reads) for t in tasks if isinstance(t, ReadTask)))
        return out
    finally:
        reader.stop()


def _in_process(opts: dict[str, str]) -> tuple[float, float, int]:
    """CPU seconds of the executors' own work, run in this process: the source's `read` of
    every task of one plan of the whole topic, and the sink's `write` of those rows (one
    object); and the rows."""
    from pyspark.sql import Row
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark.datasource import write_object
    from spark.stream import SiltStreamReader, StreamOptions

    reader = SiltStreamReader(StreamOptions.parse({"topic": "in",
                                                   "startingOffsets": "earliest", **opts}))
    start = reader.initialOffset()
    tasks = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    cpu = time.process_time()
    batches = [b for t in tasks for b in reader.read(t)]
    read_s = time.process_time() - cpu
    reader.stop()
    rows = [Row(key=r["key"], value=r["value"], partition=r["partition"])
            for b in batches for r in b.to_pylist()]
    cpu = time.process_time()
    write_object(StreamOptions.parse({"topic": "out", **opts}).store, opts["metadata"], "out",
                 iter(rows))
    return read_s, time.process_time() - cpu, len(rows)


def _latency(spark: Any, opts: dict[str, str], tmp: str, samples: int) -> list[float]:
    """ms from `Agent.produce` until the record is in the sink topic, default trigger."""
    md = MetadataStore.open(opts["metadata"])
    store = open_store(opts["store"])
    md.create_topic("live", 1)
    md.create_topic("live-out", 1)
    rows = spark.readStream.format("silt").options(topic="live", **opts).load()
    query = (rows.select("key", "value").writeStream.format("silt")
             .options(topic="live-out", queryId=f"{tmp}/live", **opts)
             .option("checkpointLocation", f"{tmp}/live").start())
    reader = Reader(store, md)
    out: list[float] = []
    try:
        while query.lastProgress is None:  # the first (empty) batch has run
            time.sleep(0.1)
        with Agent(store, md, AgentConfig()) as agent:
            for i in range(samples):
                sent = time.perf_counter()
                agent.produce("live", 0, None, b"%d" % i)
                while not any(True for _ in reader.read("live-out", 0, i)):
                    time.sleep(LATENCY_POLL_S)
                out.append((time.perf_counter() - sent) * 1000)
    finally:
        query.stop()
        md.close()
    return out


def run_spark_stream(records: int, value_size: int, per_trigger: int,
                     samples: int) -> list[dict[str, Any]]:
    from spark.session import get_session

    spark = get_session("local[1]", "silt-bench-stream",
                        **{"spark.sql.shuffle.partitions": "1"})
    spark.sparkContext.setLogLevel("ERROR")
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="silt-bench-") as tmp:
            opts = _options(tmp)
            md = MetadataStore.open(opts["metadata"], create=True)
            md.create_topic("in", TOPIC_PARTITIONS)
            md.create_topic("out", TOPIC_PARTITIONS)
            value = b"x" * value_size
            with Agent(open_store(opts["store"]), md, AgentConfig()) as agent:
                for i in range(records):
                    agent.produce("in", i % TOPIC_PARTITIONS, b"k%d" % i, value)
            objects = len([f for f in md.snapshot().files if f.state == "live"])
            md.close()
            payload = sum(len(b"k%d" % i) + value_size for i in range(records)) / 2**20
            noop = _run(spark, opts, "noop", f"{tmp}/cp-noop", per_trigger)
            silt = _run(spark, opts, "silt", f"{tmp}/cp-silt", per_trigger)
            gets = _gets_per_batch(opts, noop)
            assert sum(p["numInputRows"] for p in noop) == records
            # Per batch, medians: the first batch also starts Python workers (warm-up).
            batch_rows = statistics.median(p["numInputRows"] for p in noop)
            read_s = statistics.median(p["durationMs"]["addBatch"] for p in noop) / 1000
            both_s = statistics.median(p["durationMs"]["addBatch"] for p in silt) / 1000
            batch_mib = payload * batch_rows / records
            base = {"benchmark": "spark_stream", "records": records,
                    "value_bytes": value_size, "partitions": TOPIC_PARTITIONS,
                    "objects": objects, "batches": len(noop)}
            rows.append({**base, "side": "source (to noop)",
                         "add_batch_ms_median": round(read_s * 1000),
                         "records_per_s_per_core": round(batch_rows / read_s),
                         "mib_per_s_per_core": round(batch_mib / read_s, 1),
                         "gets_per_batch": f"{min(gets)}-{max(gets)}"})
            rows.append({**base, "side": "sink (source+sink minus source)",
                         "add_batch_ms_median": round(both_s * 1000),
                         "records_per_s_per_core": round(batch_rows / (both_s - read_s)),
                         "mib_per_s_per_core": round(batch_mib / (both_s - read_s), 1),
                         "gets_per_batch": ""})
            src_s, sink_s, n = _in_process(opts)
            assert n == records
            for side, cpu in (("source read() in process", src_s),
                              ("sink write() in process", sink_s)):
                rows.append({**base, "side": side, "batches": "",
                             "records_per_s_per_core": round(records / cpu),
                             "mib_per_s_per_core": round(payload / cpu, 1),
                             "gets_per_batch": ""})
            lat = _latency(spark, opts, tmp, samples)
            rows.append({"benchmark": "spark_stream_latency", "samples": len(lat),
                         "p50_ms": round(statistics.median(lat)),
                         "p90_ms": round(sorted(lat)[int(len(lat) * 0.9) - 1]),
                         "max_ms": round(max(lat))})
    finally:
        spark.stop()
    return rows
