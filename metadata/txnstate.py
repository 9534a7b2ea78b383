"""Transactions: which agent coordinates each transactional id (a fenced lease, leases.py),
the transaction as its coordinator last stored it (Kafka's TransactionMetadata), and the
offsets TxnOffsetCommit holds until the transaction commits.

Writes and what a crash at each leaves:

- `store_transaction` (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, the decision of
  EndTxn or of a timeout: Prepare*): one transaction fenced by the lease. Before COMMIT
  nothing changed and the client's retry is answered anew; after it the next coordinator
  loads the state (a Prepare* one it completes).
- `add_offsets` (TxnOffsetCommit): one transaction that checks the transaction's producer,
  epoch and state under its row's shared lock and upserts the pending offsets.
- `complete_in` runs INSIDE the agent flush's commit transaction that makes the markers
  visible (files.commit_produced's `hooks`): it drops the partitions whose marker that
  commit inserted and, once none is left, moves the transaction to CompleteCommit /
  CompleteAbort and its pending offsets into `group_offsets` (commit) or away (abort). So
  the markers, the state and the offsets are visible together or not at all; a crash
  before that COMMIT leaves the transaction in Prepare*, which the coordinator (or the
  one taking over its lease) completes by writing the markers again (a second marker for a
  transaction already ended in a partition ends nothing there).
- `complete_transaction`: the same move in its own transaction, for a transaction without
  partitions (only offsets, or nothing yet) or whose partitions were all deleted.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from . import leases
from . import schema as s
from .engine import Database
from .errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionCoordinatedElsewhereError,
    TransactionLeaseLostError,
)
from .groups import OFFSET_KEY, _known_partitions, _upsert
from .models import (
    TXN_COMPLETE_ABORT,
    TXN_COMPLETE_COMMIT,
    TXN_ONGOING,
    TXN_PREPARE_ABORT,
    TXN_PREPARE_COMMIT,
    AgentInfo,
    OffsetCommit,
    TransactionRecord,
    TxnLease,
)

TXN_LEASES = leases.LeaseKind(s.transaction_coordinators, "transactional_id",
                              "transactional id", TransactionCoordinatedElsewhereError,
                              TransactionLeaseLostError)
PENDING_KEY = ("transactional_id", "group_id", "topic", "partition")


# ------------------------------------------------------------------ leases


def transaction_coordinator(db: Database, transactional_id: str) -> AgentInfo | None:
    """The live agent coordinating `transactional_id`, or None."""
    return leases.holder(db, TXN_LEASES, transactional_id)


def acquire_transaction(db: Database, transactional_id: str, agent_id: str) -> TxnLease:
    """Take `transactional_id`'s lease with a new epoch (TransactionCoordinatedElsewhereError
    if another live agent holds it)."""
    return TxnLease(transactional_id, agent_id,
                    leases.acquire(db, TXN_LEASES, transactional_id, agent_id))


def held_transactions(db: Database, agent_id: str) -> dict[str, int]:
    """The transactional ids whose lease `agent_id` holds, with their epochs."""
    return leases.held(db, TXN_LEASES, agent_id)


def live_coordinators(db: Database) -> dict[str, str]:
    """Every transactional id whose lease holder is live, with that agent's id."""
    return leases.live_holders(db, TXN_LEASES)


# ------------------------------------------------------------------ stored state


def _record(row: Any) -> TransactionRecord:
    return TransactionRecord(
        transactional_id=row.transactional_id, producer_id=int(row.producer_id),
        producer_epoch=int(row.producer_epoch), last_producer_id=int(row.last_producer_id),
        last_producer_epoch=int(row.last_producer_epoch), state=row.state,
        partitions=tuple((t, int(p)) for t, p in json.loads(row.partitions)),
        groups=tuple(json.loads(row.groups)), timeout_ms=int(row.timeout_ms),
        start_ms=int(row.start_ms), updated_ms=int(row.updated_ms))


def _row(record: TransactionRecord) -> dict[str, Any]:
    return {"transactional_id": record.transactional_id, "producer_id": record.producer_id,
            "producer_epoch": record.producer_epoch,
            "last_producer_id": record.last_producer_id,
            "last_producer_epoch": record.last_producer_epoch, "state": record.state,
            "partitions": json.dumps([list(tp) for tp in sorted(record.partitions)],
                                     separators=(",", ":")),
            "groups": json.dumps(sorted(record.groups)), "timeout_ms": record.timeout_ms,
            "start_ms": record.start_ms, "updated_ms": record.updated_ms}


def load_transaction(db: Database, transactional_id: str) -> TransactionRecord | None:
    """The transactional id's state as last stored, or None if it never was."""
    t = s.transactions.c
    with db.read() as conn:
        row = conn.execute(sa.select(s.transactions)
                           .where(t.transactional_id == transactional_id)).first()
    return None if row is None else _record(row)


def store_transaction(db: Database, lease: TxnLease, record: TransactionRecord) -> None:
    """Store the transaction as its coordinator (`lease`) has it now.
    TransactionLeaseLostError if the lease was taken over (nothing written)."""
    with db.write() as conn:
        leases.fence(conn, TXN_LEASES, lease.transactional_id, lease.agent_id, lease.epoch)
        _upsert(db, conn, s.transactions, ("transactional_id",), [_row(record)])


def list_transactions(db: Database, states: Collection[str] = (),
                      producer_ids: Collection[int] = ()) -> list[TransactionRecord]:
    """Every stored transaction (of these states and producer ids, if given), by id."""
    t = s.transactions.c
    query = sa.select(s.transactions).order_by(t.transactional_id)
    if states:
        query = query.where(t.state.in_(sorted(states)))
    if producer_ids:
        query = query.where(t.producer_id.in_(sorted(producer_ids)))
    with db.read() as conn:
        return [_record(r) for r in conn.execute(query)]


def unfinished(db: Database, agent_id: str) -> list[str]:
    """The transactional ids that need their coordinator and whose lease `agent_id` holds or
    nobody live does: in Prepare* (markers still to write), or Ongoing past their timeout.
    Every agent's housekeeping timer takes these over, so no partition's last stable offset
    stays stuck behind a dead coordinator."""
    t, c = s.transactions.c, s.transaction_coordinators.c
    now = db.clock.now_ms()
    free = sa.or_(c.agent_id.is_(None), c.agent_id == agent_id,
                  ~c.agent_id.in_(leases.live_agents(db)))
    due = sa.or_(t.state.in_((TXN_PREPARE_COMMIT, TXN_PREPARE_ABORT)),
                 sa.and_(t.state == TXN_ONGOING, t.start_ms + t.timeout_ms <= now))
    with db.read() as conn:
        rows = conn.execute(
            sa.select(t.transactional_id)
            .join(s.transaction_coordinators, c.transactional_id == t.transactional_id,
                  isouter=True)
            .where(due, free).order_by(t.transactional_id))
        return [r.transactional_id for r in rows]


# ------------------------------------------------------------------ offsets


def add_offsets(db: Database, transactional_id: str, producer_id: int, producer_epoch: int,
                group_id: str, offsets: Sequence[OffsetCommit]) -> set[tuple[str, int]]:
    """Hold `offsets` of `group_id` in the ongoing transaction until it ends (TxnOffsetCommit).

    Checked in Kafka's order under the transaction row's shared lock (its completion, which
    takes it exclusively, waits): unknown transactional id or another producer id
    (InvalidProducerIdMappingError), an older epoch (ProducerFencedError), a transaction
    completing (ConcurrentTransactionsError), not Ongoing or the group never added by
    AddOffsetsToTxn (InvalidTxnStateError). Returns the partitions that do not exist (not
    written)."""
    t = s.transactions.c
    now = db.clock.now_ms()
    with db.write() as conn:
        row = conn.execute(sa.select(s.transactions)
                           .where(t.transactional_id == transactional_id)
                           .with_for_update(read=True)).first()
        if row is None or int(row.producer_id) != producer_id:
            raise InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} has no producer id {producer_id}")
        record = _record(row)
        if record.producer_epoch != producer_epoch:
            raise ProducerFencedError(
                f"producer {producer_id} epoch {producer_epoch} is fenced by epoch"
                f" {record.producer_epoch}")
        if record.state in (TXN_PREPARE_COMMIT, TXN_PREPARE_ABORT):
            raise ConcurrentTransactionsError(f"{transactional_id!r} is {record.state}")
        if record.state != TXN_ONGOING or group_id not in record.groups:
            raise InvalidTxnStateError(
                f"group {group_id!r} was not added to the transaction of"
                f" {transactional_id!r} ({record.state})")
        known = _known_partitions(conn, (o.topic for o in offsets))
        rows = [{"transactional_id": transactional_id, "group_id": group_id,
                 "topic": o.topic, "partition": o.partition, "committed_offset": o.offset,
                 "leader_epoch": o.leader_epoch, "metadata": o.metadata,
                 "committed_at_ms": now}
                for o in offsets if (o.topic, o.partition) in known]
        if rows:
            _upsert(db, conn, s.transaction_offsets, PENDING_KEY, rows)
    return {(o.topic, o.partition) for o in offsets} - known


def pending_offsets(db: Database, transactional_id: str) -> list[tuple[str, OffsetCommit]]:
    """The (group, offset) pairs held by the transactional id's ongoing transaction."""
    o = s.transaction_offsets.c
    with db.read() as conn:
        rows = conn.execute(sa.select(s.transaction_offsets)
                            .where(o.transactional_id == transactional_id)
                            .order_by(o.group_id, o.topic, o.partition))
        return [(r.group_id, OffsetCommit(r.topic, int(r.partition), int(r.committed_offset),
                                          int(r.leader_epoch), r.metadata)) for r in rows]


def pending_partitions(db: Database, group_id: str) -> set[tuple[str, int]]:
    """The partitions of `group_id` with offsets a transaction holds, not yet committed or
    aborted (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them, as
    Kafka's group coordinator does, KIP-447)."""
    o = s.transaction_offsets.c
    with db.read() as conn:
        return {(r.topic, int(r.partition)) for r in conn.execute(
            sa.select(o.topic, o.partition).where(o.group_id == group_id).distinct())}


# ------------------------------------------------------------------ completion


def _finish(db: Database, conn: sa.Connection, record: TransactionRecord, commit: bool,
            now: int) -> TransactionRecord:
    """Move `record` (Prepare*, its row locked) to Complete*: its pending offsets become
    the groups' committed offsets (commit) or go (abort)."""
    o = s.transaction_offsets.c
    mine = o.transactional_id == record.transactional_id
    if commit:
        rows = [{"group_id": r.group_id, "topic": r.topic, "partition": r.partition,
                 "committed_offset": r.committed_offset, "leader_epoch": r.leader_epoch,
                 "metadata": r.metadata, "committed_at_ms": now}
                for r in conn.execute(sa.select(s.transaction_offsets).where(mine))]
        if rows:
            _upsert(db, conn, s.group_offsets, OFFSET_KEY, rows)
    conn.execute(s.transaction_offsets.delete().where(mine))
    done = TransactionRecord(
        record.transactional_id, record.producer_id, record.producer_epoch,
        record.last_producer_id, record.last_producer_epoch,
        TXN_COMPLETE_COMMIT if commit else TXN_COMPLETE_ABORT, (), (), record.timeout_ms,
        record.start_ms, now)
    _upsert(db, conn, s.transactions, ("transactional_id",), [_row(done)])
    return done


def _locked_prepared(conn: sa.Connection, lease: TxnLease, producer_id: int,
                     producer_epoch: int, commit: bool) -> TransactionRecord | None:
    """The transaction's row, locked, if it is still the Prepare* of this producer and epoch
    under this lease (else None: completed already, or taken over)."""
    c, t = s.transaction_coordinators.c, s.transactions.c
    holder = conn.execute(sa.select(c.agent_id, c.epoch)
                          .where(c.transactional_id == lease.transactional_id)
                          .with_for_update(read=True)).first()
    if holder is None or holder.agent_id != lease.agent_id or int(holder.epoch) != lease.epoch:
        return None
    row = conn.execute(sa.select(s.transactions)
                       .where(t.transactional_id == lease.transactional_id)
                       .with_for_update()).first()
    if row is None:
        return None
    record = _record(row)
    prepared = TXN_PREPARE_COMMIT if commit else TXN_PREPARE_ABORT
    if (record.state != prepared or record.producer_id != producer_id
            or record.producer_epoch != producer_epoch):
        return None
    return record


def complete_in(db: Database, conn: sa.Connection, lease: TxnLease, producer_id: int,
                producer_epoch: int, commit: bool,
                written: Iterable[tuple[str, int]]) -> TransactionRecord | None:
    """In the transaction that made markers of this transaction visible in the partitions
    `written`: drop those from the ones waiting, and complete the transaction once none is
    left. Never raises for a state that moved on (completed already, lease taken over: the
    markers are then extra, and harmless); returns the new record, None if unchanged."""
    record = _locked_prepared(conn, lease, producer_id, producer_epoch, commit)
    if record is None:
        return None
    now = db.clock.now_ms()
    done = set(written)
    left = tuple(tp for tp in record.partitions if tp not in done)
    if not left:
        return _finish(db, conn, record, commit, now)
    if len(left) == len(record.partitions):
        return None
    rest = TransactionRecord(
        record.transactional_id, record.producer_id, record.producer_epoch,
        record.last_producer_id, record.last_producer_epoch, record.state, left,
        record.groups, record.timeout_ms, record.start_ms, now)
    _upsert(db, conn, s.transactions, ("transactional_id",), [_row(rest)])
    return rest


def complete_transaction(db: Database, lease: TxnLease, producer_id: int,
                         producer_epoch: int, commit: bool,
                         written: Iterable[tuple[str, int]] = ()) -> TransactionRecord | None:
    """`complete_in` in a transaction of its own, fenced (TransactionLeaseLostError): a
    Prepare* transaction with no partition waiting for a marker, or whose waiting
    partitions are gone (`written`: deleted topics need no marker)."""
    with db.write() as conn:
        leases.fence(conn, TXN_LEASES, lease.transactional_id, lease.agent_id, lease.epoch)
        return complete_in(db, conn, lease, producer_id, producer_epoch, commit, written)
