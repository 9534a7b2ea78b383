"""readStream.format("silt")'s planning and reading, driven as Spark drives them but without
a JVM: initialOffset, latestOffset under each read limit, partitions and read, compared with
what the library's own Reader reads; GETs counted by the moto server; data loss, new
partitions, compaction and GC between the plan and the read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
)

from agent import Agent, AgentConfig, Reader
from clock import ManualClock
from compactor import Compactor
from metadata import MetadataStore
from objectstore import open_store
from objectstore.testserver import RecordingMotoServer
from spark.errors import DataLossError
from spark.reading import ReadTask
from spark.stream import SiltStreamReader, StreamOptions, from_json, rate_limit, time_ms, to_json

pytestmark = pytest.mark.spark

Rec = tuple[str, int, int, bytes | None, bytes | None]


def _urls(root: Path) -> tuple[str, str]:
    return f"file://{root}/objects", f"sqlite:///{root}/md.db"


def _produce(store_url: str, md_url: str, topic: str, rounds: int, per_partition: int,
             clock: ManualClock | None = None) -> None:
    """`rounds` agent flushes (one object each) of `per_partition` records per partition."""
    md = MetadataStore.open(md_url, create=True)
    n = md.get_topic(topic).partitions
    store = open_store(store_url)
    for rnd in range(rounds):
        with Agent(store, md, AgentConfig(linger_ms=60_000),
                   clock=clock or ManualClock(1_000 + rnd)) as a:
            for p in range(n):
                for i in range(per_partition):
                    a.produce(topic, p, b"k%d" % (i % 3), b"r%d-p%d-%d" % (rnd, p, i),
                              (("h", b"%d" % i), ("h", b"again")))
    md.close()


def _reader(store_url: str, md_url: str, clock: ManualClock | None = None,
            **options: str) -> SiltStreamReader:
    opts = StreamOptions.parse({"store": store_url, "metadata": md_url, **options})
    return SiltStreamReader(opts, clock or ManualClock())


def _read(reader: SiltStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[Rec]:
    """What Spark's tasks would produce for the batch [start, end), as rows."""
    out: list[Rec] = []
    for task in reader.partitions(start, end):
        assert isinstance(task, ReadTask)
        for batch in reader.read(task):
            for row in batch.to_pylist():
                out.append((row["topic"], row["partition"], row["offset"], row["key"],
                            row["value"]))
    return sorted(out)


def _library(store_url: str, md_url: str, topic: str, lo: dict[int, int],
             hi: dict[int, int]) -> list[Rec]:
    md = MetadataStore.open(md_url)
    try:
        r = Reader(open_store(store_url), md)
        return sorted((topic, p, x.offset, x.key, x.value) for p in hi
                      for x in r.read(topic, p, lo.get(p, 0)) if x.offset < hi[p])
    finally:
        md.close()


def test_offsets_json_and_times() -> None:
    offsets = {("a", 1): 5, ("a", 0): 3, ("b", 0): 0}
    assert to_json(offsets) == {"a": {"0": 3, "1": 5}, "b": {"0": 0}}
    assert from_json(json.loads(json.dumps(to_json(offsets)))) == offsets
    assert [time_ms(t) for t in ("15m", "30s", "500ms", "2h", "250", "1d")] == [
        900_000, 30_000, 500, 7_200_000, 250, 86_400_000]
    with pytest.raises(ValueError, match="not a time"):
        time_ms("5 parsecs")
    # Kafka's rateLimit: pro rata, at least one offset for a partition with any.
    start, end = {("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 2}
    assert rate_limit(100, start, end, {}) == {("t", 0): 99, ("t", 1): 1}
    assert rate_limit(5000, start, end, {}) == end
    assert rate_limit(10, {}, {("t", 0): 50}, {("t", 0): 30}) == {("t", 0): 40}


def test_options_are_checked() -> None:
    base = {"store": "memory://x", "metadata": "sqlite://"}
    with pytest.raises(ValueError, match="exactly one of"):
        StreamOptions.parse(base)
    with pytest.raises(ValueError, match="exactly one of"):
        StreamOptions.parse({**base, "topic": "a", "topicPattern": "b.*"})
    with pytest.raises(ValueError, match="startingOffsets"):
        StreamOptions.parse({**base, "topic": "a", "startingOffsets": "{nope"})
    with pytest.raises(ValueError, match="must be positive"):
        StreamOptions.parse({**base, "topic": "a", "maxOffsetsPerTrigger": "0"})
    opts = StreamOptions.parse({**base, "topicPattern": "cl.*", "failOnDataLoss": "false"})
    assert opts.subscribed("clicks") and not opts.subscribed("xclicks")
    assert not opts.subscribed("/d/7")  # a topic being deleted
    assert not opts.fail_on_data_loss and opts.starting.kind == "latest"
    listed = StreamOptions.parse({**base, "subscribe": "a, b"})
    assert listed.topics == ("a", "b")


def test_batches_read_what_the_library_reads(tmp_path: Path) -> None:
    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("t", 3)
    md.create_topic("other", 1)
    md.close()
    _produce(store_url, md_url, "t", rounds=2, per_partition=4)
    reader = _reader(store_url, md_url, topic="t", startingOffsets="earliest",
                     includeHeaders="true")
    start = reader.initialOffset()
    assert start == {"t": {"0": 0, "1": 0, "2": 0}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 8, "1": 8, "2": 8}}
    tasks = reader.partitions(start, end)
    # Two objects, each holding the three partitions' chunks side by side: one GET each,
    # both in one task.
    assert [len(t.reads) for t in tasks if isinstance(t, ReadTask)] == [2]
    assert _read(reader, start, end) == _library(store_url, md_url, "t", {}, {0: 8, 1: 8, 2: 8})
    (batch,) = reader.read(tasks[0])
    row = batch.to_pylist()[0]
    assert row["headers"] == [{"key": "h", "value": b"0"}, {"key": "h", "value": b"again"}]
    assert row["timestampType"] == 0 and row["timestamp"].year == 1970
    # The next batch starts where this one ended: nothing is read twice, nothing skipped.
    _produce(store_url, md_url, "t", rounds=1, per_partition=2)
    later = reader.latestOffset(end, ReadAllAvailable())
    assert later == {"t": {"0": 10, "1": 10, "2": 10}}
    assert _read(reader, end, later) == _library(
        store_url, md_url, "t", {0: 8, 1: 8, 2: 8}, {0: 10, 1: 10, 2: 10})
    assert reader.latestOffset(later, ReadAllAvailable()) == later
    assert reader.partitions(later, later) == []
    # The executors' copy carries the options only.
    import pickle

    clone = pickle.loads(pickle.dumps(reader))
    assert clone.opts == reader.opts and clone._md is None and clone._snap is None
    reader.stop()


def test_starting_offsets(tmp_path: Path) -> None:
    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("t", 2, {"retention.ms": "-1"})
    md.close()
    _produce(store_url, md_url, "t", rounds=3, per_partition=2)  # timestamps 1000..1002
    assert _reader(store_url, md_url, topic="t").initialOffset() == {"t": {"0": 6, "1": 6}}
    given = _reader(store_url, md_url, topic="t",
                    startingOffsets='{"t": {"0": 3, "1": -2}}').initialOffset()
    assert given == {"t": {"0": 3, "1": 0}}
    with pytest.raises(ValueError, match="must name every subscribed partition"):
        _reader(store_url, md_url, topic="t", startingOffsets='{"t": {"0": 3}}').initialOffset()
    with pytest.raises(DataLossError, match="outside the log"):
        _reader(store_url, md_url, topic="t",
                startingOffsets='{"t": {"0": 99, "1": 0}}').initialOffset()
    assert _reader(store_url, md_url, topic="t", failOnDataLoss="false",
                   startingOffsets='{"t": {"0": 99, "1": 0}}').initialOffset() == {
        "t": {"0": 6, "1": 0}}
    # By timestamp: the first record at or after it (round 1 was stamped 1001).
    assert _reader(store_url, md_url, topic="t", startingTimestamp="1001").initialOffset() == {
        "t": {"0": 2, "1": 2}}
    assert _reader(store_url, md_url, topic="t",
                   startingOffsetsByTimestamp='{"t": {"0": 1002}}').initialOffset() == {
        "t": {"0": 4, "1": 6}}
    with pytest.raises(ValueError, match="no offset of t/0 has a timestamp >= 5000"):
        _reader(store_url, md_url, topic="t", startingTimestamp="5000").initialOffset()
    assert _reader(store_url, md_url, topic="t", startingTimestamp="5000",
                   startingOffsetsByTimestampStrategy="latest").initialOffset() == {
        "t": {"0": 6, "1": 6}}


def test_read_limits(tmp_path: Path) -> None:
    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("t", 2)
    md.close()
    _produce(store_url, md_url, "t", rounds=1, per_partition=50)
    start = {"t": {"0": 0, "1": 0}}
    rows = _reader(store_url, md_url, topic="t", maxOffsetsPerTrigger="30")
    assert rows.getDefaultReadLimit() == ReadMaxRows(30)
    assert rows.latestOffset(start, ReadMaxRows(30)) == {"t": {"0": 15, "1": 15}}
    # Spark's ReadAllAvailable (e.g. Trigger.Once) overrides the options.
    assert rows.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 50, "1": 50}}
    assert rows.reportLatestOffset() == {"t": {"0": 50, "1": 50}}
    both = _reader(store_url, md_url, topic="t", maxOffsetsPerTrigger="60",
                   maxBytesPerTrigger="1000")
    assert both.getDefaultReadLimit() == ReadMaxRows(60)
    small = both.latestOffset(start, both.getDefaultReadLimit())
    assert 0 < small["t"]["0"] < 30 and small["t"]["0"] == small["t"]["1"]  # bytes bind
    byte_only = _reader(store_url, md_url, topic="t", maxBytesPerTrigger="1000")
    assert byte_only.getDefaultReadLimit() == ReadMaxBytes(1000)
    assert byte_only.latestOffset(start, ReadMaxBytes(1000)) == small
    # minOffsetsPerTrigger: held back until maxTriggerDelay has passed since the last batch.
    clock = ManualClock(10_000_000)
    slow = _reader(store_url, md_url, clock, topic="t", minOffsetsPerTrigger="150",
                   maxTriggerDelay="1m")
    assert slow.getDefaultReadLimit() == ReadMinRows(150)
    first = slow.latestOffset(start, ReadMinRows(150))  # the first call: the delay is over
    assert first == {"t": {"0": 50, "1": 50}}
    _produce(store_url, md_url, "t", rounds=1, per_partition=10)
    assert slow.latestOffset(first, ReadMinRows(150)) == first  # 20 < 150: wait
    clock.advance(60_000)
    assert slow.latestOffset(first, ReadMinRows(150)) == {"t": {"0": 60, "1": 60}}
    # Trigger.AvailableNow: up to what existed at its first call, in limited batches.
    now = _reader(store_url, md_url, topic="t", maxOffsetsPerTrigger="50")
    now.prepareForTriggerAvailableNow()
    one = now.latestOffset(start, ReadMaxRows(50))
    assert one == {"t": {"0": 25, "1": 25}}
    _produce(store_url, md_url, "t", rounds=1, per_partition=10)  # after the target
    two = now.latestOffset(one, ReadMaxRows(50))
    three = now.latestOffset(two, ReadMaxRows(50))
    assert three == {"t": {"0": 60, "1": 60}}
    assert now.latestOffset(three, ReadMaxRows(50)) == three


def test_data_loss_new_partitions_and_compaction(tmp_path: Path) -> None:
    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("t", 2)
    md.create_topic("c", 2, {"cleanup.policy": "compact"})
    md.close()
    _produce(store_url, md_url, "t", rounds=2, per_partition=5)
    start = {"t": {"0": 0, "1": 0}}
    md = MetadataStore.open(md_url)
    md.delete_records({("t", 0): 7})  # records 0..6 of t/0 go before they are read
    strict = _reader(store_url, md_url, topic="t")
    end = strict.latestOffset(start, ReadAllAvailable())
    with pytest.raises(DataLossError, match=r"offsets 0\.\.6 of t/0 were removed"):
        strict.partitions(start, end)
    lenient = _reader(store_url, md_url, topic="t", failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert _read(lenient, start, end) == _library(store_url, md_url, "t", {0: 7},
                                                  {0: 10, 1: 10})
    # A partition added since: picked up from offset 0.
    md.add_partitions("t", 3)
    _produce(store_url, md_url, "t", rounds=1, per_partition=1)
    later = lenient.latestOffset(end, ReadAllAvailable())
    assert later == {"t": {"0": 11, "1": 11, "2": 1}}
    assert [r[1:3] for r in _read(lenient, end, later)] == [(0, 10), (1, 10), (2, 0)]
    # Compacted topic: planned, then compacted and the inputs collected before the read;
    # the read finds the same offsets in the compacted object, through its gaps.
    _produce(store_url, md_url, "c", rounds=3, per_partition=6)
    compacted = _reader(store_url, md_url, topic="c", startingOffsets="earliest")
    c0 = compacted.initialOffset()
    c1 = compacted.latestOffset(c0, ReadAllAvailable())
    tasks = compacted.partitions(c0, c1)
    compactor = Compactor(open_store(store_url), md)
    assert [r.outcome for r in compactor.run_once(everything=True)] == ["committed"]
    compactor.collect_garbage(grace_ms=0)
    rows = []
    for task in tasks:
        rows += [(r["partition"], r["offset"], r["value"])
                 for b in compacted.read(task) for r in b.to_pylist()]
    want = _library(store_url, md_url, "c", {}, {0: 18, 1: 18})
    assert sorted(rows) == [(p, o, v) for _, p, o, _, v in want]
    assert len(rows) == 2 * 3  # the latest of each of the 3 keys per partition
    md.close()


def test_thousand_partitions_in_one_object_cost_one_get(
        s3_url: str, postgres_url: str, moto_server: RecordingMotoServer) -> None:
    md = MetadataStore.open(postgres_url, create=True)
    md.create_topic("wide", 1000)
    md.create_topic("else", 1)
    store = open_store(s3_url)
    with Agent(store, md, AgentConfig(linger_ms=60_000), clock=ManualClock()) as a:
        for p in range(1000):
            a.produce("wide", p, None, b"v%d" % p)
            a.produce("wide", p, None, b"w%d" % p)
        a.produce("else", 0, None, b"not wanted")
    assert len([f for f in md.snapshot().files if f.state == "live"]) == 1
    md.close()
    reader = _reader(s3_url, postgres_url, topic="wide", startingOffsets="earliest")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    moto_server.clear_log()
    rows = _read(reader, start, end)
    assert len(rows) == 2000 and {r[1] for r in rows} == set(range(1000))
    gets = [r for r in moto_server.requests if r.operation == "GET"]
    assert len(gets) == 1 and gets[0].range is not None  # one ranged GET, one micro-batch
    reader.stop()


def test_read_committed(tmp_path: Path) -> None:
    """kafka.isolation.level=read_committed: batches end at the last stable offset and leave
    out aborted transactions' records; read_uncommitted reads them (never the markers)."""
    from fileformat.control import build_marker
    from tests.idempotence.helpers import client_batch

    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("t", 1)
    pid = md.allocate_producer_id()

    def marker(commit: bool) -> bytes:
        return build_marker(pid, 0, commit=commit, coordinator_epoch=0, timestamp_ms=1)

    with Agent(open_store(store_url), md, AgentConfig(linger_ms=3_600_000),
               clock=ManualClock()) as agent:
        agent.produce_batch("t", 0, client_batch(pid, 0, 0, tag=b"aborted", transactional=True))
        agent.produce_batch("t", 0, marker(False), coordinator=True)  # offsets 0-2, 3
        agent.produce_batch("t", 0, client_batch(pid, 0, 3, tag=b"kept", transactional=True))
        agent.produce_batch("t", 0, marker(True), coordinator=True)  # 4-6, 7
        agent.produce_batch("t", 0, client_batch(pid, 0, 6, tag=b"open", transactional=True))
        agent.flush()  # 8-10: still open
    start = {"t": {"0": 0}}
    committed = _reader(store_url, md_url, None, topic="t",
                        **{"kafka.isolation.level": "read_committed"})
    end = committed.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 8}}  # the open transaction's first offset
    assert [(o, v) for *_, o, _k, v in _read(committed, start, end)] == [
        (4, b"kept-0"), (5, b"kept-1"), (6, b"kept-2")]
    everything = _reader(store_url, md_url, topic="t")
    end = everything.latestOffset(start, ReadAllAvailable())
    assert end == {"t": {"0": 11}}
    assert [o for *_, o, _k, _v in _read(everything, start, end)] == [0, 1, 2, 4, 5, 6, 8, 9,
                                                                       10]
    with pytest.raises(ValueError, match=r"kafka\.isolation\.level"):
        StreamOptions.parse({"topic": "t", "kafka.isolation.level": "serializable"})
    md.close()
