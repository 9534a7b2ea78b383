"""Idempotent producers' state in the metadata store: Kafka's sequence and epoch rules,
checked in the transaction that commits the chunk, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from clock import ManualClock
from metadata import BatchRecord, MetadataStore, ProducerBatch, ProducerState, RejectedChunk
from metadata import schema as s
from metadata.config import MetadataConfig
from metadata.errors import (
    BatchRejectedError,
    InvalidCommitError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from metadata.producers import save_states
from tests.idempotence.helpers import chunk, commit, pbatch
from tests.layouts import layout

TP = ("t", 0)
OTHER = ("t", 1)


def next_offset(md: MetadataStore, partition: int = 0) -> int:
    return md.partitions("t")[partition].next_offset


def rejected(outcome: object) -> RejectedChunk:
    assert isinstance(outcome, RejectedChunk), outcome
    return outcome


def test_producer_ids_are_unique_under_concurrency(md: MetadataStore) -> None:
    got: list[int] = []
    lock = threading.Lock()

    def allocate() -> None:
        ids = [md.allocate_producer_id() for _ in range(10)]
        with lock:
            got.extend(ids)

    threads = [threading.Thread(target=allocate) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 40 and len(set(got)) == 40 and min(got) >= 1


def test_unknown_producer_any_sequence_then_in_order(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    assert commit(md, "a", {TP: [pbatch(pid, 0, 42)]}) == {TP: 0}
    assert commit(md, "b", {TP: [pbatch(pid, 0, 45), pbatch(pid, 0, 48)]}) == {TP: 3}
    state = md.producer_state(pid, "t", 0)
    assert state is not None and state.epoch == 0
    assert [(b.first_seq, b.last_seq, b.base_offset, b.last_offset) for b in state.batches] == [
        (42, 44, 0, 2), (45, 47, 3, 5), (48, 50, 6, 8)]
    assert md.producer_state(pid, "t", 1) is None


def test_duplicate_of_last_five_answered_with_original_offset(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    for i in range(6):
        commit(md, f"f{i}", {TP: [pbatch(pid, 0, 3 * i)]})
    assert next_offset(md) == 18
    # Batches 1..5 are kept: a resend of any of them is a duplicate at its first offset.
    for i in range(1, 6):
        r = rejected(commit(md, f"dup{i}", {TP: [pbatch(pid, 0, 3 * i)]})[TP])
        assert r.answers == (3 * i,)
    # Batch 0 fell out of the last five: its resend is out of order.
    r = rejected(commit(md, "old", {TP: [pbatch(pid, 0, 0)]})[TP])
    assert isinstance(r.answers[0], OutOfOrderSequenceError)
    assert next_offset(md) == 18  # nothing stored, no offsets consumed
    state = md.producer_state(pid, "t", 0)
    assert state is not None and len(state.batches) == 5


def test_gap_old_epoch_and_new_epoch(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    commit(md, "a", {TP: [pbatch(pid, 3, 0)]})
    gap = rejected(commit(md, "gap", {TP: [pbatch(pid, 3, 7)]})[TP])
    assert isinstance(gap.answers[0], OutOfOrderSequenceError)
    assert not gap.answers[0].retriable
    old = rejected(commit(md, "old", {TP: [pbatch(pid, 2, 3)]})[TP])
    assert isinstance(old.answers[0], InvalidProducerEpochError)
    assert not old.answers[0].retriable
    not_zero = rejected(commit(md, "nz", {TP: [pbatch(pid, 4, 3)]})[TP])
    assert isinstance(not_zero.answers[0], OutOfOrderSequenceError)
    assert commit(md, "bump", {TP: [pbatch(pid, 4, 0)]}) == {TP: 3}
    state = md.producer_state(pid, "t", 0)
    assert state is not None and state.epoch == 4 and len(state.batches) == 1
    # The old epoch's batch is no duplicate any more: it is fenced.
    fenced = rejected(commit(md, "zombie", {TP: [pbatch(pid, 3, 0)]})[TP])
    assert isinstance(fenced.answers[0], InvalidProducerEpochError)


def test_sequences_wrap_after_int32_max(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    commit(md, "a", {TP: [pbatch(pid, 0, 2**31 - 3, count=2)]})  # 2**31-3 .. 2**31-2
    b = pbatch(pid, 0, 2**31 - 1, count=3)  # 2**31-1, 0, 1
    assert (b.last_seq, b.seq_span) == (1, 3)
    assert commit(md, "b", {TP: [b]}) == {TP: 2}
    assert commit(md, "c", {TP: [pbatch(pid, 0, 2)]}) == {TP: 5}


def test_rejected_chunk_spares_other_partitions(md: MetadataStore) -> None:
    a, b = md.allocate_producer_id(), md.allocate_producer_id()
    commit(md, "first", {TP: [pbatch(a, 0, 0)]})
    # One object: partition 0 holds a's duplicate and b's fresh batch; partition 1 is clean.
    out = commit(md, "mixed", {TP: [pbatch(a, 0, 0), pbatch(b, 0, 0)],
                               OTHER: [pbatch(b, 0, 0)]})
    r = rejected(out[TP])
    assert r.answers[0] == 0
    assert isinstance(r.answers[1], BatchRejectedError) and r.answers[1].retriable
    assert r.other is r.answers[1]
    assert out[OTHER] == 0
    assert next_offset(md, 0) == 3 and next_offset(md, 1) == 3
    # b's batch on partition 0 was not stored: its retry is a first batch, accepted.
    assert md.producer_state(b, "t", 0) is None
    assert commit(md, "retry", {TP: [pbatch(b, 0, 0)]}) == {TP: 3}
    segs = md.find_segments("t", 0, 0)
    assert [(s.base_offset, s.last_offset) for s in segs] == [(0, 2), (3, 5)]


def test_object_with_every_chunk_rejected_is_abandoned(md: MetadataStore) -> None:
    pid = md.allocate_producer_id()
    commit(md, "first", {TP: [pbatch(pid, 0, 0)]})
    fid = md.register_pending_file("again")
    out = md.commit_produced(fid, layout([chunk("t", 0, 3)]),
                             batches={TP: [pbatch(pid, 0, 0)]})
    assert rejected(out[TP]).answers == (0,)
    assert md.get_file(fid).state == "abandoned"


def test_malformed_batches_refuse_their_chunk_only(md: MetadataStore) -> None:
    """Producer batches that are malformed (past their chunk, an epoch or sequence out of
    range) reject their own chunk (InvalidCommitError for all of it) and the other chunks of
    the object commit: one client's bad batch never fails another's. Before, one such chunk
    failed the whole flush and every client in it got KAFKA_STORAGE_ERROR. Batches for a
    partition the object does not hold are the agent's bug: the whole commit is refused."""
    fid = md.register_pending_file("x")
    with pytest.raises(InvalidCommitError, match="not in the file"):
        md.commit_produced(fid, layout([chunk("t", 1, 3)]), batches={TP: [pbatch(1, 0, 0)]})
    assert md.get_file(fid).state == "pending" and next_offset(md) == 0
    out = md.commit_produced(fid, layout([chunk("t", 0, 2), chunk("t", 1, 4)]),
                             batches={TP: [pbatch(1, 0, 0, count=3)]})
    assert isinstance(rejected(out[TP]).other, InvalidCommitError)
    assert "leaves the chunk" in str(rejected(out[TP]).other)
    assert out[OTHER] == 0
    assert md.get_file(fid).state == "live"
    assert (next_offset(md, 0), next_offset(md, 1)) == (0, 4)
    good = md.allocate_producer_id()
    mixed = commit(md, "y", {TP: [pbatch(1, 40_000, 0)], OTHER: [pbatch(good, 0, 0)]})
    assert "epoch" in str(rejected(mixed[TP]).other) and mixed[OTHER] == 4
    alone = commit(md, "z", {TP: [ProducerBatch(good + 1, 0, -1, 1, 0)]})
    assert "sequence out of range" in str(rejected(alone[TP]).other)
    assert (next_offset(md, 0), next_offset(md, 1)) == (0, 7)


def test_state_expires(metadata_url: str, clock: ManualClock) -> None:
    md = MetadataStore.open(metadata_url, clock=clock,
                            config=MetadataConfig(producer_id_expiration_ms=60_000), create=True)
    md.create_topic("t", 2)
    pid = md.allocate_producer_id()
    commit(md, "a", {TP: [pbatch(pid, 0, 0)]})
    assert md.producer_state(pid, "t", 0) is not None and md.producer_state(pid, "t", 1) is None
    clock.advance(59_999)
    assert isinstance(commit(md, "gap", {TP: [pbatch(pid, 0, 9)]})[TP], RejectedChunk)
    assert md.expire_producers() == 0
    clock.advance(1)
    assert md.producer_state(pid, "t", 0) is None
    # Idle past producer.id.expiration.ms: the producer is unknown, any sequence goes.
    assert commit(md, "later", {TP: [pbatch(pid, 0, 9)]}) == {TP: 3}
    clock.advance(60_000)
    assert md.expire_producers() == 1
    md.close()


def test_concurrent_expiry_by_several_agents_on_postgres(postgres_url: str,
                                                         clock: ManualClock) -> None:
    """Agents expire producer states on their timers at the same time as each other and as
    commits rewriting some of those states: no error, every idle state goes exactly once,
    and every state a commit wrote survives."""
    config = MetadataConfig(producer_id_expiration_ms=60_000)
    stores = [MetadataStore.open(postgres_url, clock=clock, config=config, create=True)
              for _ in range(4)]
    md = stores[0]
    md.create_topic("t", 2)
    topic_id = md.get_topic("t").id
    idle, fresh, rewritten = range(0, 1500), range(1500, 1600), range(0, 1500, 75)
    old, now = clock.now_ms() - 120_000, clock.now_ms()
    with md.write() as conn:
        save_states(md, conn, {
            (pid, topic_id, pid % 2): ProducerState(
                pid, 0, (BatchRecord(0, 2, 0, 2),), old if pid in idle else now)
            for pid in (*idle, *fresh)})
    counts: list[int] = []
    errors: list[BaseException] = []
    committing = threading.Event()
    committing.set()
    start = threading.Barrier(len(stores) + 1)

    def expire(store: MetadataStore) -> None:
        start.wait()
        try:
            while committing.is_set():
                counts.append(store.expire_producers())
            counts.append(store.expire_producers())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=expire, args=(st,)) for st in stores]
    for t in threads:
        t.start()
    start.wait()
    try:
        for pid in rewritten:  # idle producers writing again (any sequence: unknown)
            commit(md, f"again-{pid}", {("t", pid % 2): [pbatch(pid, 0, 7)]})
    finally:
        committing.clear()
        for t in threads:
            t.join()
    assert errors == []
    with md.read() as conn:
        left = {int(pid): int(at) for pid, at in conn.execute(sa.select(
            s.producer_state.c.producer_id, s.producer_state.c.updated_at_ms))}
    assert left == {pid: now for pid in (*fresh, *rewritten)}
    for pid in rewritten:  # the rewritten states are the commits' (sequence 7..9)
        state = md.producer_state(pid, "t", pid % 2)
        assert state is not None and state.batches[-1].first_seq == 7
    assert len(idle) - len(rewritten) <= sum(counts) <= len(idle)
    for st in stores:
        st.close()
