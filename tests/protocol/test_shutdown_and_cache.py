"""SIGTERM mid-produce exits 0 with every acked record readable; the segment cache turns N
concurrent reads of one segment into one GET and stays within its byte bound."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Producer

from agent import Agent, Reader
from agent.protocol.cache import SegmentCache
from fileformat.batch import iter_batches
from metadata import MetadataStore
from objectstore import open_store
from objectstore.base import ObjectStore
from objectstore.wrappers import StoreWrapper

from .server import REPO, AgentProcess


def test_sigterm_mid_produce_exits_0_and_every_acked_record_is_readable(
        agent_proc: AgentProcess) -> None:
    md = agent_proc.metadata()
    md.create_topic("t", 4)
    acked: list[tuple[int, int, bytes]] = []
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            failed.append(err)

    producer = Producer({"bootstrap.servers": agent_proc.bootstrap, "acks": "all",
                         "linger.ms": 2, "message.timeout.ms": 5_000, "retries": 0})
    for i in range(3_000):
        producer.produce("t", b"value-%d" % i, b"k%d" % i, partition=i % 4,
                         on_delivery=on_delivery)
        producer.poll(0)
        if i == 1_000:
            while len(acked) < 100:  # some acked before the signal, more in flight
                producer.poll(0.05)
            assert agent_proc.proc is not None
            agent_proc.proc.send_signal(signal.SIGTERM)
    producer.flush(30)
    assert agent_proc.proc is not None
    assert agent_proc.proc.wait(60) == 0  # after the one SIGTERM above (no second signal)
    assert len(acked) + len(failed) == 3_000 and len(acked) >= 100
    reader = Reader(open_store(agent_proc.store_url), md)
    stored = {(p, r.offset): r.value for p in range(4) for r in reader.read("t", p)}
    md.close()
    assert all(stored.get((p, o)) == v for p, o, v in acked)
    assert "stopping" in agent_proc.log()


class SlowCountingStore(StoreWrapper):
    """Counts ranged GETs and makes each slow enough that concurrent readers overlap."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.range_gets = 0
        self.started = threading.Event()
        self.release = threading.Event()

    def get_range_writable(self, key: str, start: int, end: int) -> bytearray:
        self.range_gets += 1
        self.started.set()
        self.release.wait(30)
        return super().get_range_writable(key, start, end)


def test_segment_cache_single_flight_and_bounded(tmp_path: Any) -> None:
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("hot", 2)
    base = open_store(f"file://{tmp_path}/objects")
    with Agent(base, md) as agent:
        for p in (0, 1):
            agent.produce("hot", p, b"k", b"x" * 1000)
    seg0 = md.find_segments("hot", 0, 0)[0]
    seg1 = md.find_segments("hot", 1, 0)[0]
    store = SlowCountingStore(base)
    cache = SegmentCache(store, max_bytes=seg0.data_len + seg1.data_len - 1)
    with ThreadPoolExecutor(8) as pool:
        reads = [pool.submit(cache.get, seg0) for _ in range(8)]
        assert store.started.wait(30)
        store.release.set()  # readers queued on the GET in flight wait for it; later ones hit
        results = [f.result() for f in reads]
    assert all(r is results[0] for r in results)
    assert store.range_gets == 1 and cache.gets == 1
    assert cache.get(seg0) is results[0] and store.range_gets == 1  # a hit
    cache.get(seg1)  # both do not fit: the least recently used one goes
    cache.get(seg0)
    assert store.range_gets == 3
    assert Reader(base, md).read("hot", 0).__next__().value == b"x" * 1000
    md.close()


def test_segment_cache_keeps_batches_as_served(tmp_path: Any) -> None:
    """Cached segments have absolute baseOffsets and leader epoch -1 (what Fetch sends as
    is), and still verify: both fields are outside the CRC."""
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 1)
    store = open_store(f"file://{tmp_path}/objects")
    with Agent(store, md) as agent:
        for flush in range(3):
            for i in range(flush + 2):
                agent.produce("t", 0, b"k", b"v%d" % i)
            agent.flush()
    segments = md.find_segments("t", 0, 0)
    assert [s.base_offset for s in segments] == [0, 2, 5]
    cache = SegmentCache(store, 1 << 20)
    for seg in segments:
        headers = [h for h, _ in iter_batches(cache.get(seg))]
        assert headers[0].base_offset == seg.base_offset
        assert all(h.leader_epoch == -1 for h in headers)
    md.close()


def test_a_taken_port_is_one_line_and_exit_1(agent_proc: AgentProcess, tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cli", "--store", agent_proc.store_url, "--metadata",
         agent_proc.metadata_url, "agent", "--listen", agent_proc.bootstrap],
        env={"PYTHONPATH": str(REPO), "PATH": ""}, cwd=tmp_path, capture_output=True,
        text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"silt: cannot serve on {agent_proc.bootstrap}:")
