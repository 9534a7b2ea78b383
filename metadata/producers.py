"""Idempotent producers: producer ids, and each producer's state per partition, with Kafka's
rules (ProducerStateManager; franz-go kfake's 00_produce.go) as pure functions.

Per (producer id, partition) the store keeps the producer's epoch and its last five batches
(first and last sequence, base and last offset). A batch of that producer is, in order:

- of an unknown producer (no state, or state idle past `producer.id.expiration.ms`):
  accepted at any sequence;
- a DUPLICATE if its epoch is the current one and its sequence range is one of the last
  five batches': answered with that batch's original base offset, never stored twice;
- INVALID_PRODUCER_EPOCH if its epoch is older than the current one;
- with a newer epoch: accepted only at sequence 0 (the producer bumped its epoch and
  restarted its sequences), else OUT_OF_ORDER_SEQUENCE_NUMBER;
- with the current epoch: accepted if its first sequence follows the last batch's last
  sequence (2**31 - 1 is followed by 0; 0 when a marker cleared the batches), else
  OUT_OF_ORDER_SEQUENCE_NUMBER.

Transactions (ProducerAppendInfo): a transactional batch is checked as above and opens the
producer's transaction on the partition if none is open (at its first offset); an
idempotent (non-transactional) batch while one is open is INVALID_TXN_STATE. A marker
(COMMIT/ABORT control batch) carries no sequence: only its epoch is checked (older:
INVALID_PRODUCER_EPOCH); it takes the producer to its epoch (a new epoch clears the kept
batches, as `ProducerStateEntry.maybeUpdateProducerEpoch`), keeps the sequences otherwise,
and ends the open transaction (an ABORT leaves an aborted-transaction row); a marker with
no open transaction changes nothing else (Kafka writes no index entry for it).

The check and the state update run in the transaction that commits the chunk holding the
batch (files.py, after the partition row locks, so committers of one partition serialize);
agents run the same `check_batch` early against what they know (agent/idempotence.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from . import schema as s
from .engine import Database, key_rows, pg_arrays
from .errors import (
    BatchRejectedError,
    InvalidProducerBatchError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    MetadataError,
    OutOfOrderSequenceError,
    UnknownTopicError,
)
from .models import (
    MAX_EPOCH,
    NO_SEQUENCE,
    SEQUENCE_WRAP,
    AbortedTxn,
    BatchKind,
    BatchRecord,
    ChunkChanges,
    ProducerBatch,
    ProducerState,
    RejectedChunk,
)

BATCHES_KEPT = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
NO_PRODUCER_ID = -1  # a batch header's producerId when the producer is not idempotent

# (producer_id, topic_id, partition): the key of a producer_state row.
StateKey = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The batch was committed before: answer it with its original base offset."""

    base_offset: int


Verdict = Duplicate | MetadataError | None  # None: accept


# ------------------------------------------------------------------ the rules (pure)


def in_sequence(last_seq: int, first_seq: int) -> bool:
    """Whether `first_seq` is the sequence after `last_seq` (wrapping after 2**31 - 1)."""
    return first_seq == (last_seq + 1) % SEQUENCE_WRAP


def current(state: ProducerState | None, now_ms: int,
            expiration_ms: int) -> ProducerState | None:
    """`state`, or None once it has been idle for `expiration_ms` (the producer is then
    unknown again, as after Kafka's producer.id.expiration.ms)."""
    if state is None or state.updated_at_ms + expiration_ms <= now_ms:
        return None
    return state


def check_batch(state: ProducerState | None, batch: ProducerBatch) -> Verdict:
    """Kafka's verdict on `batch` given the producer's current state on the partition
    (None: unknown producer; pass it through `current` first)."""
    if state is None:
        return None
    if batch.is_marker:  # no sequence: the epoch only (checkProducerEpoch)
        if batch.epoch < state.epoch:
            return InvalidProducerEpochError(
                f"producer {batch.producer_id}: marker epoch {batch.epoch} is older than the"
                f" current {state.epoch}")
        return None
    if batch.epoch == state.epoch:
        for b in state.batches:
            if b.first_seq == batch.first_seq and b.last_seq == batch.last_seq:
                return Duplicate(b.base_offset)
        last = state.batches[-1].last_seq if state.batches else NO_SEQUENCE
        if not in_sequence(last, batch.first_seq):
            return OutOfOrderSequenceError(
                f"producer {batch.producer_id} epoch {batch.epoch}: sequence"
                f" {batch.first_seq} does not follow {last}")
        return None
    if batch.epoch < state.epoch:
        return InvalidProducerEpochError(
            f"producer {batch.producer_id}: epoch {batch.epoch} is older than the current"
            f" {state.epoch}")
    if batch.first_seq != 0:
        return OutOfOrderSequenceError(
            f"producer {batch.producer_id}: new epoch {batch.epoch} must start at sequence 0,"
            f" not {batch.first_seq}")
    return None


def advance(state: ProducerState | None, batch: ProducerBatch, base_offset: int,
            now_ms: int) -> ProducerState:
    """The state after `batch` (accepted by `check_batch`) was stored at `base_offset`: a
    data batch joins the kept batches, a marker keeps them (its epoch unchanged) or clears
    them (a new epoch)."""
    kept = state.batches if state is not None and state.epoch == batch.epoch else ()
    if batch.is_marker:
        return ProducerState(batch.producer_id, batch.epoch, kept, now_ms)
    record = BatchRecord(batch.first_seq, batch.last_seq, base_offset,
                         base_offset + batch.seq_span - 1)
    return ProducerState(batch.producer_id, batch.epoch,
                         (*kept, record)[-BATCHES_KEPT:], now_ms)


def check_txn(open_first: int | None, batch: ProducerBatch) -> InvalidTxnStateError | None:
    """Kafka's transaction check of an accepted data batch, given the first offset of its
    producer's open transaction on the partition (None: none open)."""
    if open_first is not None and batch.kind == BatchKind.IDEMPOTENT:
        return InvalidTxnStateError(
            f"producer {batch.producer_id}: a non-transactional batch while its transaction"
            f" begun at offset {open_first} is open")
    return None


def check_chunk(states: Mapping[int, ProducerState | None], batches: Sequence[ProducerBatch],
                chunk_base: int, now_ms: int, expiration_ms: int,
                open_txns: Mapping[int, int] | None = None) -> RejectedChunk | ChunkChanges:
    """All of a chunk's producer batches, in order, against their producers' `states` and
    open transactions (`open_txns`: producer id -> first offset) on the chunk's partition
    (missing: unknown, none open) if the chunk is stored at `chunk_base`: the changes if
    every batch is accepted, else the chunk's rejection (duplicates answered with their
    original offsets, errors, and a retriable rejection for the rest)."""
    work: dict[int, ProducerState] = {}
    txns = dict(open_txns or {})
    aborted: list[AbortedTxn] = []
    answers: list[int | Exception | None] = []
    for b in batches:
        pid = b.producer_id
        state = work[pid] if pid in work else current(states.get(pid), now_ms, expiration_ms)
        verdict: Verdict = check_batch(state, b)
        if verdict is None and not b.is_marker:
            verdict = check_txn(txns.get(pid), b)
        if verdict is not None:
            answers.append(verdict.base_offset if isinstance(verdict, Duplicate) else verdict)
            continue
        offset = chunk_base + b.offset_delta
        work[pid] = advance(state, b, offset, now_ms)
        answers.append(None)
        if b.is_marker:
            first = txns.pop(pid, None)
            if first is not None and b.kind == BatchKind.ABORT:
                aborted.append(AbortedTxn(pid, first, offset))
        elif b.kind == BatchKind.TRANSACTIONAL:
            txns.setdefault(pid, offset)
    if all(a is None for a in answers):
        return ChunkChanges(work, txns, tuple(aborted))
    other = BatchRejectedError(
        "another batch of this chunk was a duplicate or out of order; nothing was stored")
    return RejectedChunk(tuple(other if a is None else a for a in answers), other)


def validate_batches(span: int, batches: Sequence[ProducerBatch], where: str) -> None:
    """InvalidProducerBatchError unless every batch is well formed and inside a chunk of `span`
    offsets, in offset order, without overlaps."""
    end = 0
    for b in batches:
        if b.producer_id < 0 or not 0 <= b.epoch <= MAX_EPOCH:
            raise InvalidProducerBatchError(f"{where}: bad producer id or epoch in {b}")
        if b.is_marker:
            if b.first_seq != NO_SEQUENCE or b.last_seq != NO_SEQUENCE:
                raise InvalidProducerBatchError(f"{where}: a marker with sequences in {b}")
        elif not (0 <= b.first_seq < SEQUENCE_WRAP and 0 <= b.last_seq < SEQUENCE_WRAP):
            raise InvalidProducerBatchError(f"{where}: sequence out of range in {b}")
        if b.offset_delta < end or b.offset_delta + b.seq_span > span:
            raise InvalidProducerBatchError(f"{where}: batch {b} overlaps or leaves the chunk")
        end = b.offset_delta + b.seq_span


# ------------------------------------------------------------------ rows


def _state_of(row: Any) -> ProducerState:
    pid, epoch, batches, updated = row
    return ProducerState(int(pid), int(epoch),
                         tuple(BatchRecord(*b) for b in json.loads(batches)), int(updated))


def load_states(db: Database, conn: sa.Connection,
                keys: Iterable[StateKey]) -> dict[StateKey, ProducerState]:
    """The stored states of these (producer_id, topic_id, partition) keys, in one statement
    driven by the keys (as `files.lock_partitions`: arrays / one JSON text, not an IN list).
    Callers hold the partitions' row locks, so the rows cannot change under them."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    cols = 'ps.producer_id, ps.epoch, ps.batches, ps.updated_at_ms, ps.topic_id, ps."partition"'
    k = key_rows(db.pg, wanted, ("bigint", "bigint", "integer"))
    rows = conn.exec_driver_sql(
        f'SELECT {cols} FROM {k.source} JOIN producer_state AS ps ON ps.producer_id = '
        f'{k.cols[0]} AND ps.topic_id = {k.cols[1]} AND ps."partition" = {k.cols[2]}',
        k.params).all()
    return {(int(r[0]), int(r[4]), int(r[5])): _state_of(r[:4]) for r in rows}


def save_states(db: Database, conn: sa.Connection,
                states: Mapping[StateKey, ProducerState]) -> None:
    """Insert or replace these states in one driver call (an upsert, so a row deleted by
    `expire_producers` meanwhile is simply written again)."""
    if not states:
        return
    rows = [(k[0], k[1], k[2], st.epoch,
             json.dumps([[b.first_seq, b.last_seq, b.base_offset, b.last_offset]
                         for b in st.batches]), st.updated_at_ms)
            for k, st in sorted(states.items())]
    upsert = ('ON CONFLICT (producer_id, topic_id, "partition") DO UPDATE SET '
              'epoch = excluded.epoch, batches = excluded.batches, '
              'updated_at_ms = excluded.updated_at_ms')
    cols = 'producer_id, topic_id, "partition", epoch, batches, updated_at_ms'
    if db.pg:
        conn.exec_driver_sql(
            f'INSERT INTO producer_state ({cols}) SELECT * FROM unnest(%s::bigint[], '
            f'%s::bigint[], %s::integer[], %s::integer[], %s::text[], %s::bigint[]) {upsert}',
            pg_arrays(zip(*rows, strict=True),
                      ("bigint", "bigint", "integer", "integer", "text", "bigint")))
    else:
        conn.exec_driver_sql(f"INSERT INTO producer_state ({cols}) VALUES (?, ?, ?, ?, ?, ?) "
                             f"{upsert}", rows)


# ------------------------------------------------------------------ the store's API


def allocate_producer_id(db: Database) -> int:
    """A producer id never handed out before (InitProducerId without a transactional id:
    Kafka gives every such call a fresh id at epoch 0).

    One write transaction increments the sequence row (its row lock on PostgreSQL, the
    write lock on SQLite), so concurrent callers get distinct ids. Crash before COMMIT:
    nothing allocated; after, if the answer is lost: an id is skipped, harmlessly.
    """
    with db.write() as conn:
        return s.take_next(conn, s.producer_ids)


def producer_state(db: Database, producer_id: int, topic: str,
                   partition: int) -> ProducerState | None:
    """The producer's current state on the partition; None if unknown or expired."""
    ps, t = s.producer_state.c, s.topics.c
    with db.read() as conn:
        topic_id = conn.execute(sa.select(t.id).where(t.name == topic)).scalar()
        if topic_id is None:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        row = conn.execute(
            sa.select(ps.producer_id, ps.epoch, ps.batches, ps.updated_at_ms)
            .where(ps.producer_id == producer_id, ps.topic_id == topic_id,
                   ps.partition == partition)).first()
    state = None if row is None else _state_of(row)
    return current(state, db.clock.now_ms(), db.config.producer_id_expiration_ms)


def partition_producers(db: Database, topic: str, partition: int) -> list[ProducerState]:
    """The producers with a current (unexpired) state on the partition, by producer id
    (DescribeProducers); UnknownTopicError if the topic does not exist."""
    ps, t = s.producer_state.c, s.topics.c
    with db.read() as conn:
        topic_id = conn.execute(sa.select(t.id).where(t.name == topic)).scalar()
        if topic_id is None:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        rows = conn.execute(
            sa.select(ps.producer_id, ps.epoch, ps.batches, ps.updated_at_ms)
            .where(ps.topic_id == topic_id, ps.partition == partition)
            .order_by(ps.producer_id)).all()
    now, ttl = db.clock.now_ms(), db.config.producer_id_expiration_ms
    states = (current(_state_of(row), now, ttl) for row in rows)
    return [st for st in states if st is not None]


def expire_producers(db: Database) -> int:
    """Delete producer states idle past producer.id.expiration.ms; how many went.

    Expired rows are already ignored by the checks (`current`); this only reclaims them.
    One transaction; crash before COMMIT: nothing deleted (the next call does it). Every
    agent calls it (on a timer), concurrently with the others and with commits. SQLite:
    the write lock serializes them. PostgreSQL: the rows are locked `SKIP LOCKED`, so
    concurrent expirers split the rows instead of waiting on (or deadlocking with) each
    other, and a row a commit is rewriting right now is left to it (the commit's upsert
    writes it fresh, or writes it again if it was deleted first).
    """
    cutoff = db.clock.now_ms() - db.config.producer_id_expiration_ms
    ps = s.producer_state.c
    expired = ps.updated_at_ms <= cutoff
    with db.write() as conn:
        if db.pg:
            key = sa.tuple_(ps.producer_id, ps.topic_id, ps.partition)
            locked = (sa.select(ps.producer_id, ps.topic_id, ps.partition).where(expired)
                      .with_for_update(skip_locked=True))
            return int(conn.execute(
                s.producer_state.delete().where(key.in_(locked))).rowcount)
        return int(conn.execute(s.producer_state.delete().where(expired)).rowcount)

