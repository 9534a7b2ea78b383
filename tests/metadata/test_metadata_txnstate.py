"""The transaction coordinators' state in the metadata store (metadata/txnstate.py), on both
backends: leases and their fencing, stored transactions, pending offsets, and the
completion that runs in an agent commit's transaction (`commit_produced` hooks)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
import sqlalchemy as sa

from clock import ManualClock
from metadata import MetadataStore, OffsetCommit, TransactionRecord, TxnLease
from metadata import txnstate as tx
from metadata.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionCoordinatedElsewhereError,
    TransactionLeaseLostError,
)
from metadata.files import Outcomes
from metadata.models import (
    TXN_COMPLETE_ABORT,
    TXN_COMPLETE_COMMIT,
    TXN_ONGOING,
    TXN_PREPARE_ABORT,
    TXN_PREPARE_COMMIT,
)
from tests.layouts import layout
from tests.metadata.metadata_helpers import chunk, commit


@pytest.fixture
def agents(store: MetadataStore) -> MetadataStore:
    """Two live agents, a1 and a2, and a topic t with two partitions."""
    store.register_agent("a1", "h1", 9092)
    store.register_agent("a2", "h2", 9092)
    store.create_topic("t", 2)
    commit(store, "k0", [chunk("t", 0, span=5), chunk("t", 1, span=5)])
    return store


def _txn(state: str, partitions: tuple[tuple[str, int], ...] = (("t", 0), ("t", 1)),
         groups: tuple[str, ...] = ("g",), epoch: int = 3) -> TransactionRecord:
    return TransactionRecord("tx", 42, epoch, -1, -1, state, partitions, groups, 60_000,
                             1000, 2000)


def test_lease_is_fenced_like_a_groups(agents: MetadataStore, clock: ManualClock) -> None:
    lease = agents.acquire_transaction("tx", "a1")
    assert lease == TxnLease("tx", "a1", 1)
    with pytest.raises(TransactionCoordinatedElsewhereError):
        agents.acquire_transaction("tx", "a2")
    agents.store_transaction(lease, _txn(TXN_ONGOING))
    assert agents.load_transaction("tx") == _txn(TXN_ONGOING)
    holder = agents.transaction_coordinator("tx")
    assert holder is not None and holder.agent_id == "a1"
    clock.advance(agents.config.broker_session_timeout_ms + 1)
    agents.heartbeat_agent("a2")
    assert agents.acquire_transaction("tx", "a2").epoch == 2  # a1 died: taken over
    with pytest.raises(TransactionLeaseLostError):
        agents.store_transaction(lease, _txn(TXN_PREPARE_COMMIT))
    assert agents.load_transaction("tx") == _txn(TXN_ONGOING)
    assert agents.held_transactions("a2") == {"tx": 2}


def test_offsets_wait_for_the_commit(agents: MetadataStore) -> None:
    lease = agents.acquire_transaction("tx", "a1")
    agents.store_transaction(lease, _txn(TXN_ONGOING))
    offsets = [OffsetCommit("t", 0, 3), OffsetCommit("t", 7, 1)]
    assert agents.add_transaction_offsets("tx", 42, 3, "g", offsets) == {("t", 7)}
    assert agents.fetch_offsets("g") == []  # not visible before the commit
    assert agents.pending_transaction_offsets("tx") == [("g", OffsetCommit("t", 0, 3))]
    agents.store_transaction(lease, _txn(TXN_PREPARE_COMMIT, partitions=()))
    done = agents.complete_transaction(lease, 42, 3, True)
    assert done is not None and done.state == TXN_COMPLETE_COMMIT and done.groups == ()
    assert [(o.topic, o.partition, o.offset) for o in agents.fetch_offsets("g")] == [
        ("t", 0, 3)]
    assert agents.pending_transaction_offsets("tx") == []


def test_offsets_of_an_abort_go(agents: MetadataStore) -> None:
    lease = agents.acquire_transaction("tx", "a1")
    agents.store_transaction(lease, _txn(TXN_ONGOING))
    agents.add_transaction_offsets("tx", 42, 3, "g", [OffsetCommit("t", 0, 3)])
    agents.store_transaction(lease, _txn(TXN_PREPARE_ABORT, partitions=()))
    assert agents.complete_transaction(lease, 42, 3, False) is not None
    assert agents.fetch_offsets("g") == []
    assert agents.pending_transaction_offsets("tx") == []
    assert agents.load_transaction("tx") is not None
    assert agents.list_transactions(states=[TXN_COMPLETE_ABORT])[0].state == TXN_COMPLETE_ABORT


@pytest.mark.parametrize(("args", "error"), [
    (("nope", 42, 3, "g"), InvalidProducerIdMappingError),
    (("tx", 41, 3, "g"), InvalidProducerIdMappingError),
    (("tx", 42, 2, "g"), ProducerFencedError),
    (("tx", 42, 3, "other"), InvalidTxnStateError),
])
def test_txn_offset_commit_checks(agents: MetadataStore, args: tuple[str, int, int, str],
                                  error: type[Exception]) -> None:
    agents.store_transaction(agents.acquire_transaction("tx", "a1"), _txn(TXN_ONGOING))
    with pytest.raises(error):
        agents.add_transaction_offsets(*args, [OffsetCommit("t", 0, 3)])


def test_txn_offset_commit_while_completing(agents: MetadataStore) -> None:
    agents.store_transaction(agents.acquire_transaction("tx", "a1"), _txn(TXN_PREPARE_COMMIT))
    with pytest.raises(ConcurrentTransactionsError):
        agents.add_transaction_offsets("tx", 42, 3, "g", [OffsetCommit("t", 0, 3)])


def _commit_with_hook(store: MetadataStore, key: str, partitions: list[int],
                      lease: TxnLease, commit: bool) -> Outcomes:
    """An agent commit of chunks of t whose hook completes the transaction."""
    hook = functools.partial(_hook, store, lease, commit)
    chunks = [chunk("t", p) for p in partitions]
    fid = store.register_pending_file(key)
    return store.commit_produced(fid, layout(chunks, size=1000, data_offset=8,
                                             data_length=900, meta_offset=908,
                                             meta_length=92), batches={}, hooks=[hook])


def _hook(store: MetadataStore, lease: TxnLease, commit: bool, conn: sa.Connection,
          outcomes: Outcomes) -> None:
    written = [tp for tp, o in outcomes.items() if isinstance(o, int)]
    tx.complete_in(store, conn, lease, 42, 3, commit, written)


def test_markers_complete_the_transaction_in_their_commit(agents: MetadataStore) -> None:
    lease = agents.acquire_transaction("tx", "a1")
    agents.store_transaction(lease, _txn(TXN_ONGOING))
    agents.add_transaction_offsets("tx", 42, 3, "g", [OffsetCommit("t", 1, 4)])
    agents.store_transaction(lease, _txn(TXN_PREPARE_COMMIT))
    _commit_with_hook(agents, "k1", [0], lease, True)  # one partition's marker
    half = agents.load_transaction("tx")
    assert half is not None and half.state == TXN_PREPARE_COMMIT
    assert half.partitions == (("t", 1),) and agents.fetch_offsets("g") == []
    _commit_with_hook(agents, "k2", [0, 1], lease, True)  # again (a retry): completes
    done = agents.load_transaction("tx")
    assert done is not None and done.state == TXN_COMPLETE_COMMIT and done.partitions == ()
    assert [o.offset for o in agents.fetch_offsets("g")] == [4]
    # A later (duplicate) marker commit changes nothing and does not fail the commit.
    assert _commit_with_hook(agents, "k3", [0], lease, True) == {("t", 0): 7}
    assert agents.load_transaction("tx") == done


def test_hook_of_a_lost_lease_writes_nothing(agents: MetadataStore,
                                             clock: ManualClock) -> None:
    lease = agents.acquire_transaction("tx", "a1")
    agents.store_transaction(lease, _txn(TXN_PREPARE_ABORT))
    clock.advance(agents.config.broker_session_timeout_ms + 1)
    agents.heartbeat_agent("a2")
    agents.acquire_transaction("tx", "a2")
    assert agents.unfinished_transactions("a2") == ["tx"]
    _commit_with_hook(agents, "k1", [0, 1], lease, False)
    assert agents.load_transaction("tx") == _txn(TXN_PREPARE_ABORT)


def test_unfinished_lists_orphans_and_timeouts(agents: MetadataStore,
                                               clock: ManualClock) -> None:
    lease = agents.acquire_transaction("tx", "a1")
    ongoing = dataclasses.replace(_txn(TXN_ONGOING), start_ms=clock.now_ms())
    agents.store_transaction(lease, ongoing)
    assert agents.unfinished_transactions("a1") == []
    assert agents.unfinished_transactions("a2") == []
    clock.advance(60_000)  # past its timeout; a1 still holds it while live
    agents.heartbeat_agent("a1")
    agents.heartbeat_agent("a2")
    assert agents.unfinished_transactions("a1") == ["tx"]
    assert agents.unfinished_transactions("a2") == []
    clock.advance(agents.config.broker_session_timeout_ms + 1)
    agents.heartbeat_agent("a2")
    assert agents.unfinished_transactions("a2") == ["tx"]  # a1 died: a2 takes it over
