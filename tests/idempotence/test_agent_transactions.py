"""Agent.produce_batch with transactional batches and the coordinator's markers (the trusted
Python API the transaction coordinator writes through): stored as sent, the partition's last
stable offset and aborted-transaction index kept by the commit; a control batch refused
unless the coordinator appends it; on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent import Agent, AgentConfig, Reader
from clock import ManualClock
from fileformat.batch import read_header
from fileformat.control import build_marker, read_marker
from fileformat.errors import ControlBatchError
from metadata import AbortedTxn, MetadataStore
from metadata.errors import InvalidProducerEpochError, InvalidTxnStateError
from objectstore import ObjectStore, open_store
from tests.idempotence.helpers import client_batch

HOLD = AgentConfig(linger_ms=3_600_000)  # flushes only when a test calls flush()


@pytest.fixture
def store(request: pytest.FixtureRequest) -> ObjectStore:
    return open_store(f"memory://txn-{id(request)}")


@pytest.fixture
def agent(store: ObjectStore, md: MetadataStore, clock: ManualClock) -> Iterator[Agent]:
    a = Agent(store, md, HOLD, clock=clock)
    yield a
    a.close()


def mark(pid: int, epoch: int, commit: bool) -> bytes:
    return build_marker(pid, epoch, commit=commit, coordinator_epoch=0,
                        timestamp_ms=1_700_000_000_000)


def test_transactions_through_the_agent(agent: Agent, store: ObjectStore,
                                        md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    one = agent.produce_batch("t", 0, client_batch(pid, 0, 0, tag=b"a", transactional=True))
    agent.flush()
    assert one.result() == 0
    p0 = md.partitions("t")[0]
    assert (p0.last_stable_offset, p0.next_offset) == (0, 3)
    # The coordinator's ABORT, then a committed transaction in the same flush.
    aborted = agent.produce_batch("t", 0, mark(pid, 0, False), coordinator=True)
    two = agent.produce_batch("t", 0, client_batch(pid, 0, 3, tag=b"b", transactional=True))
    committed = agent.produce_batch("t", 0, mark(pid, 0, True), coordinator=True)
    agent.flush()
    assert (aborted.result(), two.result(), committed.result()) == (3, 4, 7)
    p0 = md.partitions("t")[0]
    assert p0.last_stable_offset == p0.next_offset == 8
    assert md.aborted_transactions([("t", 0, 0, 8)]) == {("t", 0): [AbortedTxn(pid, 0, 3)]}
    # Stored as sent: the markers read back as markers.
    batches = list(Reader(store, md).read_batches("t", 0, from_offset=0))
    kinds = [(read_header(b).base_offset, read_header(b).is_control) for b in batches]
    assert kinds == [(0, False), (3, True), (4, False), (7, True)]
    assert read_marker(batches[1]).commit is False and read_marker(batches[3]).commit


def test_control_batches_only_from_the_coordinator(agent: Agent, md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    with pytest.raises(ControlBatchError):
        agent.produce_batch("t", 0, mark(pid, 0, True))
    assert agent.buffer_used == 0


def test_commit_refuses_zombie_markers_and_plain_batches_in_a_transaction(
        agent: Agent, md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    agent.produce_batch("t", 0, client_batch(pid, 1, 0, transactional=True))
    agent.flush()
    zombie = agent.produce_batch("t", 0, mark(pid, 0, True), coordinator=True)
    agent.flush()
    with pytest.raises(InvalidProducerEpochError):
        zombie.result()
    plain = agent.produce_batch("t", 0, client_batch(pid, 1, 3))
    agent.flush()
    with pytest.raises(InvalidTxnStateError):
        plain.result()
    p0 = md.partitions("t")[0]
    assert (p0.last_stable_offset, p0.next_offset) == (0, 3)
