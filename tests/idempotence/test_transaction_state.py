"""Transactions on the partitions' side, in the commit that stores the batches: open
transactions (the last stable offset), the aborted-transaction index, Kafka's sequence and
epoch rules for transactional batches and markers; retention and topic deletion drop the
rows; on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import sqlalchemy as sa

from metadata import AbortedTxn, MetadataStore, RejectedChunk
from metadata import schema as s
from metadata.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from metadata.models import ChunkChanges
from metadata.producers import check_chunk
from tests.idempotence.helpers import commit, marker, pbatch, tbatch

TP = ("t", 0)
OTHER = ("t", 1)


def lso(md: MetadataStore, partition: int = 0) -> int:
    return md.partitions("t")[partition].last_stable_offset


def hw(md: MetadataStore, partition: int = 0) -> int:
    return md.partitions("t")[partition].next_offset


def aborted(md: MetadataStore, lo: int = 0, hi: int = 1 << 40,
            partition: int = 0) -> list[AbortedTxn]:
    return md.aborted_transactions([("t", partition, lo, hi)]).get(("t", partition), [])


def rows(md: MetadataStore, table: sa.Table) -> int:
    with md.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


# ------------------------------------------------------------------ the rules (pure)


def test_check_chunk_opens_and_ends_transactions() -> None:
    got = check_chunk({}, [tbatch(7, 0, 0), replace(tbatch(8, 0, 0), offset_delta=3),
                           replace(tbatch(9, 0, 0), offset_delta=6)], 100, 0, 1000)
    assert isinstance(got, ChunkChanges)
    assert got.open_txns == {7: 100, 8: 103, 9: 106} and got.aborted == ()
    # Markers of the same chunk: 7 commits, 8 aborts, 5 had nothing open.
    got = check_chunk(got.states, [marker(7, 0, commit=True), marker(8, 0, commit=False),
                                   marker(5, 0, commit=False)], 109, 0, 1000,
                      got.open_txns)
    assert isinstance(got, ChunkChanges)
    assert got.open_txns == {9: 106}
    assert got.aborted == (AbortedTxn(8, 103, 109),)
    # A marker keeps the sequences of its epoch: 7 goes on at 3.
    assert got.states[7].epoch == 0 and got.states[7].batches[-1].last_seq == 2


def test_marker_with_a_new_epoch_clears_sequences() -> None:
    first = check_chunk({}, [tbatch(7, 0, 0)], 0, 0, 1000)
    assert isinstance(first, ChunkChanges)
    bumped = check_chunk(first.states, [marker(7, 1, commit=False)], 3, 0, 1000,
                         first.open_txns)
    assert isinstance(bumped, ChunkChanges)
    assert bumped.states[7].epoch == 1 and bumped.states[7].batches == ()
    # The new epoch starts at 0 (a later sequence is out of order)...
    late = check_chunk(bumped.states, [tbatch(7, 1, 3)], 4, 0, 1000)
    assert isinstance(late, RejectedChunk)
    assert isinstance(late.answers[0], OutOfOrderSequenceError)
    assert isinstance(check_chunk(bumped.states, [tbatch(7, 1, 0)], 4, 0, 1000), ChunkChanges)
    # ... and the old epoch is fenced, data and markers alike.
    for b in (tbatch(7, 0, 3), marker(7, 0, commit=True)):
        old = check_chunk(bumped.states, [b], 4, 0, 1000)
        assert isinstance(old, RejectedChunk)
        assert isinstance(old.answers[0], InvalidProducerEpochError)


def test_idempotent_batch_inside_an_open_transaction_is_refused() -> None:
    got = check_chunk({}, [tbatch(7, 0, 0), pbatch(7, 0, 3, offset_delta=3)], 0, 0, 1000)
    assert isinstance(got, RejectedChunk)
    assert got.answers[0] is got.other and isinstance(got.answers[1], InvalidTxnStateError)


# ------------------------------------------------------------------ in the store


def test_open_transaction_holds_the_last_stable_offset(md: MetadataStore) -> None:
    pid, plain = md.allocate_producer_id(), md.allocate_producer_id()
    assert commit(md, "a", {TP: [pbatch(plain, 0, 0)]}) == {TP: 0}
    assert lso(md) == hw(md) == 3
    assert commit(md, "b", {TP: [tbatch(pid, 0, 0)]}) == {TP: 3}
    assert commit(md, "c", {TP: [pbatch(plain, 0, 3), tbatch(pid, 0, 3)]}) == {TP: 6}
    assert (lso(md), hw(md)) == (3, 12)
    assert lso(md, 1) == hw(md, 1) == 0  # the other partition is not held
    assert md.snapshot().partitions[0].last_stable_offset == 3
    # COMMIT: the LSO moves to the high watermark, nothing is indexed.
    assert commit(md, "d", {TP: [marker(pid, 0, commit=True)]}) == {TP: 12}
    assert lso(md) == hw(md) == 13 and aborted(md) == []
    assert rows(md, s.open_txns) == 0
    # The producer goes on with its sequences after the marker.
    assert commit(md, "e", {TP: [tbatch(pid, 0, 6)]}) == {TP: 13}
    assert lso(md) == 13


def test_abort_is_indexed_and_found_by_range(md: MetadataStore) -> None:
    a, b = md.allocate_producer_id(), md.allocate_producer_id()
    commit(md, "1", {TP: [tbatch(a, 0, 0)], OTHER: [tbatch(a, 0, 0)]})  # 0-2 both
    commit(md, "2", {TP: [tbatch(b, 0, 0)]})  # 3-5
    assert lso(md) == 0 and lso(md, 1) == 0
    commit(md, "3", {TP: [marker(a, 0, commit=False)], OTHER: [marker(a, 0, commit=False)]})
    assert lso(md) == 3 and lso(md, 1) == hw(md, 1) == 4  # b still open on partition 0
    commit(md, "4", {TP: [marker(b, 0, commit=False)]})  # 7
    assert lso(md) == hw(md) == 8
    assert aborted(md) == [AbortedTxn(a, 0, 6), AbortedTxn(b, 3, 7)]
    assert aborted(md, partition=1) == [AbortedTxn(a, 0, 3)]
    # Overlap with [lo, hi): marker at or after lo, first offset before hi.
    assert aborted(md, 7, 8) == [AbortedTxn(b, 3, 7)]
    assert aborted(md, 0, 3) == [AbortedTxn(a, 0, 6)]
    assert aborted(md, 8, 20) == []
    both = md.aborted_transactions([("t", 0, 4, 5), ("t", 1, 0, 1), ("nope", 0, 0, 9)])
    assert both == {("t", 0): [AbortedTxn(a, 0, 6), AbortedTxn(b, 3, 7)],
                    ("t", 1): [AbortedTxn(a, 0, 3)]}


def test_marker_without_open_transaction_is_stored_and_changes_nothing(
        md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    assert commit(md, "m", {TP: [marker(pid, 0, commit=False)]}) == {TP: 0}
    assert hw(md) == lso(md) == 1 and aborted(md) == []
    state = md.producer_state(pid, "t", 0)
    assert state is not None and state.epoch == 0 and state.batches == ()
    # A first batch of that epoch then starts at sequence 0.
    assert isinstance(commit(md, "x", {TP: [tbatch(pid, 0, 5)]})[TP], RejectedChunk)
    assert commit(md, "y", {TP: [tbatch(pid, 0, 0)]}) == {TP: 1}


def test_zombie_marker_and_invalid_txn_state_store_nothing(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    commit(md, "a", {TP: [tbatch(pid, 1, 0)]})
    old = commit(md, "b", {TP: [marker(pid, 0, commit=True)]})[TP]
    assert isinstance(old, RejectedChunk)
    assert isinstance(old.answers[0], InvalidProducerEpochError)
    plain = commit(md, "c", {TP: [pbatch(pid, 1, 3)]})[TP]
    assert isinstance(plain, RejectedChunk) and isinstance(plain.answers[0],
                                                           InvalidTxnStateError)
    assert (hw(md), lso(md), rows(md, s.open_txns)) == (3, 0, 1)


def test_transaction_opened_and_aborted_in_one_chunk(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    got = commit(md, "a", {TP: [tbatch(pid, 0, 0), marker(pid, 0, commit=False),
                                tbatch(pid, 0, 3)]})
    assert got == {TP: 0}
    assert aborted(md) == [AbortedTxn(pid, 0, 3)]
    assert lso(md) == 4 and hw(md) == 7  # the second transaction is open at 4


def test_delete_records_drops_index_rows_below_the_log_start(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    commit(md, "a", {TP: [tbatch(pid, 0, 0)]})
    commit(md, "b", {TP: [marker(pid, 0, commit=False)]})  # aborted 0..3
    commit(md, "c", {TP: [tbatch(pid, 0, 3)]})  # open at 4
    commit(md, "d", {TP: [marker(pid, 0, commit=False)]})  # aborted 4..7
    md.delete_records({("t", 0): 4})
    assert aborted(md) == [AbortedTxn(pid, 4, 7)]
    md.delete_records({("t", 0): 8})
    assert aborted(md) == [] and rows(md, s.aborted_txns) == 0


def test_last_stable_offset_never_below_the_log_start(md: MetadataStore) -> None:
    pid, other = md.allocate_producer_id(), md.allocate_producer_id()
    commit(md, "a", {TP: [tbatch(pid, 0, 0)]})
    commit(md, "b", {TP: [pbatch(other, 0, 0)]})
    md.delete_records({("t", 0): 3})
    assert lso(md) == 3


def test_topic_deletion_drops_transaction_rows(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    commit(md, "a", {TP: [tbatch(pid, 0, 0)], OTHER: [tbatch(pid, 0, 0)]})
    commit(md, "b", {TP: [marker(pid, 0, commit=False)]})
    assert rows(md, s.open_txns) == 1 and rows(md, s.aborted_txns) == 1
    md.delete_topic("t")
    assert rows(md, s.open_txns) == 0 and rows(md, s.aborted_txns) == 0
