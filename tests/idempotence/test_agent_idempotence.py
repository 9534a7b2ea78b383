"""Agent.produce_batch with idempotent producers (batches from kafka-python's builder): resends
answered with the original offsets and stored once, across agents too; gaps and old epochs
refused; on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agent import Agent, AgentConfig, Reader
from clock import ManualClock
from metadata import MetadataStore
from metadata.config import MetadataConfig
from metadata.errors import (
    BatchRejectedError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from objectstore import ObjectStore, open_store
from tests.idempotence.helpers import client_batch

# Flushes happen only when a test calls flush().
HOLD = AgentConfig(linger_ms=3_600_000)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> ObjectStore:
    return open_store(f"memory://idem-{id(request)}")


@pytest.fixture
def agents(store: ObjectStore, md: MetadataStore, clock: ManualClock) -> Iterator[list[Agent]]:
    made = [Agent(store, md, HOLD, clock=clock) for _ in range(2)]
    yield made
    for a in made:
        a.close()


def values(store: ObjectStore, md: MetadataStore, partition: int = 0) -> list[bytes | None]:
    return [r.value for r in Reader(store, md).read("t", partition, from_offset=0)]


def test_resend_in_flight_and_after_commit_same_agent(
    agents: list[Agent], store: ObjectStore, md: MetadataStore
) -> None:
    a = agents[0]
    pid = md.allocate_producer_id()
    first = a.produce_batch("t", 0, client_batch(pid, 0, 0, tag=b"one"))
    resend = a.produce_batch("t", 0, client_batch(pid, 0, 0, tag=b"one"))
    second = a.produce_batch("t", 0, client_batch(pid, 0, 3, tag=b"two"))
    assert not first.done()
    a.flush()
    assert (first.result(), resend.result(), second.result()) == (0, 0, 3)
    # Committed: a resend is answered at once, without buffering or a flush.
    again = a.produce_batch("t", 0, client_batch(pid, 0, 3, tag=b"two"))
    assert again.done() and again.result() == 3
    assert values(store, md) == [b"one-0", b"one-1", b"one-2", b"two-0", b"two-1", b"two-2"]
    assert a.totals.objects == 1


def test_resend_to_second_agent_after_lost_ack(
    agents: list[Agent], store: ObjectStore, md: MetadataStore
) -> None:
    first, second = agents
    pid = md.allocate_producer_id()
    fut = first.produce_batch("t", 1, client_batch(pid, 0, 10))
    first.flush()
    assert fut.result() == 0  # ... and the producer never got this answer
    retry = second.produce_batch("t", 1, client_batch(pid, 0, 10))
    assert retry.done() and retry.result() == 0
    nxt = second.produce_batch("t", 1, client_batch(pid, 0, 13))
    second.flush()
    assert nxt.result() == 3
    assert len(values(store, md, 1)) == 6 and second.totals.records == 1


def test_duplicate_caught_at_commit_rejects_only_its_chunk(
    agents: list[Agent], store: ObjectStore, md: MetadataStore
) -> None:
    a, b = agents
    pid, other = md.allocate_producer_id(), md.allocate_producer_id()
    a.produce_batch("t", 0, client_batch(pid, 0, 0))
    a.flush()
    # b learns the state (batch 0 committed) through a resend, answered at once.
    assert b.produce_batch("t", 0, client_batch(pid, 0, 0)).result() == 0
    batch1 = a.produce_batch("t", 0, client_batch(pid, 0, 3))
    a.flush()
    assert batch1.result() == 3  # ... an ack the producer never got
    # b still believes seq 3 is next: it buffers the resend; the commit finds the duplicate.
    dup = b.produce_batch("t", 0, client_batch(pid, 0, 3))
    bystander = b.produce_batch("t", 0, client_batch(other, 0, 0))
    elsewhere = b.produce_batch("t", 1, client_batch(other, 0, 0))
    assert not dup.done()
    b.flush()
    assert dup.result() == 3
    with pytest.raises(BatchRejectedError) as info:
        bystander.result()
    assert info.value.retriable
    assert elsewhere.result() == 0
    assert len(values(store, md, 0)) == 6  # batches 0 and 1, once each
    # The rejected batch's retry goes through.
    retry = b.produce_batch("t", 0, client_batch(other, 0, 0))
    b.flush()
    assert retry.result() == 6


def test_concurrent_duplicate_commits_from_two_agents(
    agents: list[Agent], store: ObjectStore, md: MetadataStore
) -> None:
    pid = md.allocate_producer_id()
    futures = [agent.produce_batch("t", 0, client_batch(pid, 0, 0)) for agent in agents]
    threads = [threading.Thread(target=agent.flush) for agent in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [f.result() for f in futures] == [0, 0]
    assert values(store, md) == [b"v-0", b"v-1", b"v-2"]
    assert md.partitions("t")[0].next_offset == 3
    assert sum(agent.totals.objects for agent in agents) == 1


def test_gap_old_epoch_and_new_epoch(agents: list[Agent], store: ObjectStore,
                                     md: MetadataStore) -> None:
    a = agents[0]
    pid = md.allocate_producer_id()
    a.produce_batch("t", 0, client_batch(pid, 1, 0))
    a.flush()
    gap = a.produce_batch("t", 0, client_batch(pid, 1, 9))
    assert gap.done()
    with pytest.raises(OutOfOrderSequenceError):
        gap.result()
    with pytest.raises(InvalidProducerEpochError):
        a.produce_batch("t", 0, client_batch(pid, 0, 3)).result()
    with pytest.raises(OutOfOrderSequenceError):
        a.produce_batch("t", 0, client_batch(pid, 2, 3)).result()
    bumped = a.produce_batch("t", 0, client_batch(pid, 2, 0, tag=b"e2"))
    a.flush()
    assert bumped.result() == 3
    assert values(store, md) == [b"v-0", b"v-1", b"v-2", b"e2-0", b"e2-1", b"e2-2"]
    assert a.totals.objects == 2  # refused batches were never buffered


def test_state_moved_by_another_agent_is_reread(agents: list[Agent], md: MetadataStore) -> None:
    a, b = agents
    pid = md.allocate_producer_id()
    a.produce_batch("t", 0, client_batch(pid, 0, 0))
    a.flush()
    b.produce_batch("t", 0, client_batch(pid, 0, 3))
    b.flush()
    # a last saw seq 2: seq 6 looks like a gap until a re-reads the committed state.
    nxt = a.produce_batch("t", 0, client_batch(pid, 0, 6))
    a.flush()
    assert nxt.result() == 6


def test_expired_producer_starts_afresh(metadata_url: str, clock: ManualClock,
                                        store: ObjectStore) -> None:
    md = MetadataStore.open(metadata_url, clock=clock,
                            config=MetadataConfig(producer_id_expiration_ms=1_000), create=True)
    md.create_topic("t", 1)
    with Agent(store, md, HOLD, clock=clock) as a:
        pid = md.allocate_producer_id()
        a.produce_batch("t", 0, client_batch(pid, 0, 0))
        a.flush()
        with pytest.raises(OutOfOrderSequenceError):
            a.produce_batch("t", 0, client_batch(pid, 0, 50)).result()
        clock.advance(1_000)
        late = a.produce_batch("t", 0, client_batch(pid, 0, 50))
        a.flush()
        assert late.result() == 3
    md.close()
