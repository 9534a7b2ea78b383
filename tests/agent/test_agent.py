"""The produce/consume path on every backend: one object per flush, exact round trip."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agent import (
    Agent,
    AgentConfig,
    BufferFullError,
    FlushError,
    FlushTotals,
    InvalidRecordError,
    NullKeyError,
    PartitionOutOfRangeError,
    Reader,
    RecordTooLargeError,
    producer,
)
from agent.producer import ProduceFuture
from clock import ManualClock
from costs import PerPartitionObjectsAgent
from faults import GatedStore
from fileformat import build_batch
from fileformat.batch import HEADER_SIZE, TIMESTAMP_TYPE_MASK, verify_batch
from metadata import MetadataStore
from metadata.errors import OffsetOutOfRangeError
from metadata.topicconfig import AlterOp, ConfigChange
from objectstore import ObjectStore, ObjectWriter, StoreWrapper, open_store
from tests.idempotence.helpers import client_batch


@dataclass
class Env:
    store: ObjectStore
    metadata: MetadataStore


@pytest.fixture(params=["memory+sqlite", "file+sqlite", "s3+postgres"])
def env(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Env]:
    if request.param == "memory+sqlite":
        store_url, md_url = f"memory://agent-{id(request)}", f"sqlite:///{tmp_path}/md.db"
    elif request.param == "file+sqlite":
        store_url, md_url = f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db"
    else:
        store_url = request.getfixturevalue("s3_url")
        md_url = request.getfixturevalue("postgres_url")
    md = MetadataStore.open(md_url, create=True)
    yield Env(open_store(store_url), md)
    md.close()


def test_one_object_per_flush_many_partitions_exact_round_trip(env: Env) -> None:
    env.metadata.create_topic("events", 50)
    produced: dict[int, list[tuple[bytes, bytes, tuple[tuple[str, bytes | None], ...]]]] = {}
    futures: list[tuple[int, int, ProduceFuture]] = []
    with Agent(env.store, env.metadata, AgentConfig(linger_ms=10_000, flush_bytes=64 * 1024)) as a:
        for i in range(3000):
            p = (i * 7) % 50
            key, value = b"key-%d" % i, b"value-%d" % i * 10
            headers = (("h", b"%d" % i),) if i % 3 == 0 else ()
            produced.setdefault(p, []).append((key, value, headers))
            futures.append((p, len(produced[p]) - 1, a.produce("events", p, key, value, headers)))
    for _, idx, fut in futures:
        assert fut.result() == idx  # offsets 0..n-1 per partition, in produce order
    objects = list(env.store.list("data/"))
    assert len(objects) == len(a.reports) >= 2
    assert all(r.partitions == 50 for r in list(a.reports)[:-1])  # many partitions each
    reader = Reader(env.store, env.metadata)
    for p, recs in produced.items():
        got = list(reader.read("events", p, 0))
        assert [r.offset for r in got] == list(range(len(recs)))
        assert [(r.key, r.value, r.headers) for r in got] == recs
    assert [r.offset for r in reader.read("events", 3, 5, max_records=2)] == [5, 6]
    assert list(reader.read("events", 3, 10_000)) == []


def test_linger_flushes_without_close(env: Env) -> None:
    env.metadata.create_topic("t", 2)
    with Agent(env.store, env.metadata, AgentConfig(linger_ms=20)) as agent:
        fut = agent.produce("t", 1, b"k", b"v")
        assert fut.result(timeout=10) == 0
        assert len(agent.reports) == 1


def test_compacted_topic_rejects_null_key_and_large_records(env: Env) -> None:
    env.metadata.create_topic(
        "state", 1, {"cleanup.policy": "compact", "max.message.bytes": "1000"}
    )
    with Agent(env.store, env.metadata) as agent:
        with pytest.raises(NullKeyError, match=r"must have a key"):
            agent.produce("state", 0, None, b"v")
        with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
            agent.produce("state", 0, b"k", b"x" * 2000)
        with pytest.raises(PartitionOutOfRangeError, match="partition 5 out of range"):
            agent.produce("state", 5, b"k", b"v")
        assert agent.produce("state", 0, b"k", None).result() == 0  # tombstones are fine


def test_below_log_start_is_an_error(env: Env) -> None:
    env.metadata.create_topic("t", 1)
    with pytest.raises(OffsetOutOfRangeError):
        list(Reader(env.store, env.metadata).read("t", 0, -1))


class FailingPutStore(StoreWrapper):
    """Wraps a store; every object upload fails."""

    def put_stream(self, key: str) -> ObjectWriter:
        raise OSError("injected upload failure")


def test_failed_flush_fails_every_future_and_shows_nothing(tmp_path: object) -> None:
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 3)
    store = open_store("memory://failing")
    agent = Agent(FailingPutStore(store), md, AgentConfig(linger_ms=10_000))
    futs = [agent.produce("t", i % 3, b"k", b"v") for i in range(10)]
    agent.close()
    for fut in futs:
        with pytest.raises(FlushError, match="injected upload failure"):
            fut.result()
    assert all(p.next_offset == 0 for p in md.partitions("t"))
    assert [f.state for f in md.files_to_gc(older_than_ms=2**62)] == ["abandoned"]
    md.close()


class FailSecondPutStore(FailingPutStore):
    """Only the second object upload fails."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.puts = 0

    def put_stream(self, key: str) -> ObjectWriter:
        self.puts += 1
        if self.puts == 2:
            raise OSError("injected upload failure")
        return self.inner.put_stream(key)


def test_per_partition_objects_fail_and_succeed_per_partition(tmp_path: object) -> None:
    """With one object per partition (the costs tool's design 3), one flush can commit some
    partitions and fail others: each future reports its own partition's outcome."""
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 3)
    store = FailSecondPutStore(open_store("memory://partly"))
    agent = PerPartitionObjectsAgent(store, md, AgentConfig(linger_ms=10_000))
    futs = [(i % 3, agent.produce("t", i % 3, b"k", b"v")) for i in range(9)]
    seen: list[int] = []
    futs[0][1].add_done_callback(lambda f: seen.append(f.result()))
    agent.close()
    for part, fut in futs:
        assert fut.done()
        if part == 1:  # partitions flush in order: the second object is partition 1's
            assert isinstance(fut.exception(), FlushError)
            with pytest.raises(FlushError, match="injected upload failure"):
                fut.result()
        else:
            assert fut.exception() is None and fut.result() in (0, 1, 2)
    assert seen == [0]
    assert [p.next_offset for p in md.partitions("t")] == [3, 0, 3]
    md.close()


def test_reports_keep_the_last_objects_and_totals_count_every_one(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running agent keeps only the last REPORTS_KEPT flush reports; its totals count
    every committed object, and no failed one."""
    monkeypatch.setattr(producer, "REPORTS_KEPT", 2)
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 3)
    store = FailSecondPutStore(open_store("memory://totals"))
    with PerPartitionObjectsAgent(store, md, AgentConfig(linger_ms=10_000)) as agent:
        for _ in range(2):
            for p in range(3):
                agent.produce("t", p, b"k", b"v")
            agent.flush()
    objects = list(store.list("data/"))
    assert len(objects) == 5  # 2 flushes x 3 partitions, one upload failed
    assert len(agent.reports) == 2 and {r.object_key for r in agent.reports} <= {
        o.key for o in objects}
    assert agent.totals == FlushTotals(flushes=2, objects=5, records=5,
                                       bytes=sum(o.size for o in objects))
    md.close()


def test_full_buffer_blocks_then_fails_clearly(tmp_path: object) -> None:
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 1)
    gate = threading.Event()
    store = GatedStore(open_store("memory://blocking"), gate)
    cfg = AgentConfig(linger_ms=0, flush_bytes=1024, buffer_memory=4096, max_block_ms=200)
    agent = Agent(store, md, cfg)
    with pytest.raises(BufferFullError, match=r"buffer\.memory=4096"):
        for _ in range(100):
            agent.produce("t", 0, b"k", b"x" * 500)
    gate.set()
    agent.close()
    md.close()


def test_batches_of_a_call_get_buffer_room_together_or_not_at_all(tmp_path: object) -> None:
    """produce_batches holds room for all of its batches first: with room for two of three,
    none is buffered (BufferFullError at once with block_s=0); room held for batches
    that are not buffered (an idempotent resend) is given back, and the listener hears of
    room freed by flushes."""
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 1)
    store = GatedStore(open_store("memory://room"))
    one = build_batch([(0, 1, None, b"x" * 1000, [])])
    agent = Agent(store, md, AgentConfig(linger_ms=0, flush_bytes=1024,
                                         buffer_memory=3 * len(one) + len(one) // 2))
    freed = threading.Event()
    agent.set_room_listener(freed.set)
    try:
        first = agent.produce_batches("t", 0, [one])  # flushing, stalled at its PUT
        with pytest.raises(BufferFullError):
            agent.produce_batches("t", 0, [one] * 3, block_s=0)
        assert agent.buffer_used == len(one)
        pid = md.allocate_producer_id()
        idem = client_batch(pid, 0, 0, count=1)
        agent.produce_batches("t", 0, [idem])
        used = agent.buffer_used
        agent.produce_batches("t", 0, [idem])  # a resend of a batch in flight: no room kept
        assert agent.buffer_used == used
        freed.clear()
        store.gate.set()
        assert first[0].result(timeout=30) == 0
        assert freed.wait(30)
        agent.flush()
        assert agent.buffer_used == 0
    finally:
        store.gate.set()
        agent.close()
        md.close()


def test_topics_changed_elsewhere_are_seen(tmp_path: object, clock: ManualClock) -> None:
    """Another agent's CreatePartitions is seen at once (an out-of-range partition reloads
    the topic), its altered configs within topic.refresh.ms (the flusher drops the cache)."""
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", clock=clock, create=True)
    other = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", clock=clock)  # "another agent"
    md.create_topic("t", 1)
    config = AgentConfig(linger_ms=0, topic_refresh_ms=1000)
    with Agent(open_store(f"file://{tmp_path}/objects"), md, config, clock=clock) as agent:
        assert agent.produce("t", 0, None, b"v").result(timeout=10) == 0
        other.add_partitions("t", 3)
        assert agent.produce("t", 2, None, b"v").result(timeout=10) == 0
        other.alter_topic_configs("t", [ConfigChange("max.message.bytes", AlterOp.SET, "10")])
        assert agent.produce("t", 0, None, b"v").result(timeout=10) == 1  # cached: 1 MiB
        clock.advance(1000)
        with pytest.raises(InvalidRecordError, match=r"exceeds max\.message\.bytes=10"):
            for _ in range(1000):  # until the flusher has woken and dropped the cache
                agent.produce("t", 0, None, b"v").result(timeout=10)
                threading.Event().wait(0.01)
    other.close()
    md.close()


def test_log_append_time_topic_stamps_batches_with_the_agents_clock(
        tmp_path: object, clock: ManualClock) -> None:
    """message.timestamp.type=LogAppendTime: each batch is stored as Kafka's broker appends
    it (timestamp type bit, maxTimestamp = the agent's clock, CRC valid, records as sent)
    and its future says the stamp; a CreateTime topic's batch is stored byte for byte.
    `Agent.produce` stamps the batches it encodes too."""
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("stamped", 1, {"message.timestamp.type": "LogAppendTime"})
    md.create_topic("created", 1)
    sent = build_batch([(0, 5, b"k", b"v", []), (1, 7, b"k", b"w", [])])
    store = open_store("memory://stamped")
    with Agent(store, md, AgentConfig(linger_ms=600_000), clock=clock) as agent:
        clock.advance(1234)
        now = clock.now_ms()
        stamped_fut = agent.produce_batches("stamped", 0, [sent])[0]
        created_fut = agent.produce_batches("created", 0, [sent])[0]
        agent.flush(30)
        assert (stamped_fut.result(timeout=30), stamped_fut.log_append_time) == (0, now)
        assert (created_fut.result(timeout=30), created_fut.log_append_time) == (0, -1)
        # The Python API: records stamped with the time the agent accepts each, the batch
        # with the latest of them; a CreateTime topic keeps the caller's timestamps.
        first = agent.produce("stamped", 0, b"a", b"1", timestamp=5)
        clock.advance(10)
        second = agent.produce("stamped", 0, b"b", b"2", timestamp=6)
        kept = agent.produce("created", 0, b"c", b"3", timestamp=5)
        agent.flush(30)  # one flush: the two records in one batch
        assert (first.result(timeout=30), second.result(timeout=30)) == (2, 3)
        assert kept.result(timeout=30) == 2
    reader = Reader(store, md)
    [stamped, encoded] = list(reader.read_batches("stamped", 0))
    header = verify_batch(stamped)  # the CRC holds
    assert header.attributes & TIMESTAMP_TYPE_MASK and header.max_timestamp == now
    assert (header.first_timestamp, header.record_count) == (5, 2)
    assert bytes(stamped)[HEADER_SIZE:] == sent[HEADER_SIZE:]
    header = verify_batch(encoded)
    assert header.attributes & TIMESTAMP_TYPE_MASK and header.max_timestamp == now + 10
    assert (header.first_timestamp, header.record_count) == (now, 2)
    [created, caller] = list(reader.read_batches("created", 0))
    assert bytes(created)[8:] == sent[8:]  # all but the baseOffset (the same 0 here)
    header = verify_batch(caller)
    assert not header.attributes & TIMESTAMP_TYPE_MASK and header.max_timestamp == 5
    md.close()
