"""Compaction and idempotent producers: records are deduplicated as Kafka's cleaner does
(superseded records go, even in a producer's last batch), and dedupe state survives because
it lives in the metadata store, not in the log; a chunk rejected at commit is dead space."""

from __future__ import annotations

from agent import Agent, AgentConfig, Reader
from clock import ManualClock
from compactor import Compactor, CompactorConfig
from metadata import MetadataStore
from objectstore import open_store
from tests.idempotence.helpers import client_batch


def test_compaction_keeps_dedupe_state_of_superseded_batches(metadata_url: str,
                                                             clock: ManualClock) -> None:
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    store = open_store(f"memory://keep-last-{id(md)}")
    md.create_topic("c", 1, configs={"cleanup.policy": "compact"})
    p, q = md.allocate_producer_id(), md.allocate_producer_id()
    with Agent(store, md, AgentConfig(linger_ms=3_600_000), clock=clock) as agent:
        # Same keys k0..k2 each time: q's batch supersedes both of p's.
        for pid, seq, tag in ((p, 0, b"p1"), (p, 3, b"p2"), (q, 0, b"q")):
            agent.produce_batch("c", 0, client_batch(pid, 0, seq, tag=tag))
            agent.flush()
    (report,) = Compactor(store, md, CompactorConfig(), clock=clock).run_once(everything=True)
    assert report.outcome == "committed", report
    got = [(r.offset, r.value) for r in Reader(store, md).read("c", 0, from_offset=0)]
    # Kafka's result: only the latest record of each key, p's last batch included.
    assert got == [(6, b"q-0"), (7, b"q-1"), (8, b"q-2")]
    # A resend of p's last batch is still answered with its original offset, stored nowhere.
    with Agent(store, md, clock=clock) as agent:
        assert agent.produce_batch("c", 0, client_batch(p, 0, 3, tag=b"p2")).result() == 3
    assert [r.offset for r in Reader(store, md).read("c", 0, from_offset=0)] == [6, 7, 8]
    md.close()


def test_rejected_chunk_is_dead_space_compaction_drops(metadata_url: str,
                                                       clock: ManualClock) -> None:
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    store = open_store(f"memory://dead-chunk-{id(md)}")
    md.create_topic("t", 2)
    pid, other = md.allocate_producer_id(), md.allocate_producer_id()
    hold = AgentConfig(linger_ms=3_600_000)
    with Agent(store, md, hold, clock=clock) as a, Agent(store, md, hold, clock=clock) as b:
        # Both agents buffer the same batch; a commits first, b's partition-0 chunk is then
        # rejected at commit (dead bytes in its object) while its partition-1 chunk commits.
        a.produce_batch("t", 0, client_batch(pid, 0, 0, tag=b"once"))
        dup = b.produce_batch("t", 0, client_batch(pid, 0, 0, tag=b"once"))
        b.produce_batch("t", 1, client_batch(other, 0, 0, tag=b"p1"))
        a.flush()
        b.flush()
        assert dup.result() == 0
    live_files = {s.file_id for p in (0, 1) for s in md.find_segments("t", p, 0)}
    assert len(live_files) == 2  # b's object is live through its partition-1 chunk only
    reports = Compactor(store, md, CompactorConfig(), clock=clock).run_once(everything=True)
    assert [r.outcome for r in reports] == ["committed"]
    for p, want in ((0, [b"once-0", b"once-1", b"once-2"]), (1, [b"p1-0", b"p1-1", b"p1-2"])):
        assert [r.value for r in Reader(store, md).read("t", p, from_offset=0)] == want
    assert not live_files & {s.file_id for p in (0, 1) for s in md.find_segments("t", p, 0)}
    md.close()
