"""Transactions on the partitions' side: each partition's open transactions (its last stable
offset) and its aborted-transaction index (Kafka's .txnindex), kept by the agent commit that
stores the batches (files.py; the rules are producers.py's `check_chunk`) and read by Fetch,
ListOffsets and the compactor.

Kafka's ProducerStateManager keeps the open transactions per partition in memory (their
first offsets give the first unstable offset, hence the last stable offset) and appends an
aborted transaction to the segment's transaction index when its ABORT marker is written.
Here both are rows (schema v8): `open_txns` (topic_id, partition, producer_id,
first_offset) and `aborted_txns` (topic_id, partition, last_offset = the marker's offset,
producer_id, first_offset), changed in the transaction that commits the batches, so a crash
leaves both exactly as the committed log says. Retention and DeleteRecords drop the aborted
rows wholly below the new log start (`drop_below`); a topic's deletion drops its rows with
its partitions.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

import sqlalchemy as sa

from . import schema as s
from .engine import Database, key_rows
from .models import AbortedTxn

# (producer_id, topic_id, partition): the key of an open_txns row (as producers.StateKey).
TxnKey = tuple[int, int, int]
# (topic_id, partition)
PartitionKey = tuple[int, int]


def load_open(db: Database, conn: sa.Connection,
              keys: Iterable[TxnKey]) -> dict[TxnKey, int]:
    """The open transactions' first offsets of these (producer_id, topic_id, partition)
    keys, in one statement driven by the keys (as `producers.load_states`). Callers hold
    the partitions' row locks."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    cols = 'o.producer_id, o.topic_id, o."partition", o.first_offset'
    k = key_rows(db.pg, wanted, ("bigint", "bigint", "integer"))
    rows = conn.exec_driver_sql(
        f'SELECT {cols} FROM {k.source} JOIN open_txns AS o ON o.producer_id = {k.cols[0]} '
        f'AND o.topic_id = {k.cols[1]} AND o."partition" = {k.cols[2]}', k.params).all()
    return {(int(r[0]), int(r[1]), int(r[2])): int(r[3]) for r in rows}


def save_changes(conn: sa.Connection, before: Mapping[TxnKey, int],
                 after: Mapping[TxnKey, int],
                 aborted: Sequence[tuple[PartitionKey, AbortedTxn]]) -> None:
    """Write a commit's transaction changes: open rows `before` that are not in `after`
    (or moved) go, rows new in `after` come, aborted transactions are indexed."""
    o = s.open_txns.c
    gone = [k for k, first in before.items() if after.get(k) != first]
    for pid, tid, part in sorted(gone):
        conn.execute(s.open_txns.delete().where(
            o.topic_id == tid, o.partition == part, o.producer_id == pid))
    new = [{"producer_id": k[0], "topic_id": k[1], "partition": k[2], "first_offset": first}
           for k, first in sorted(after.items()) if before.get(k) != first]
    if new:
        conn.execute(s.open_txns.insert(), new)
    if aborted:
        conn.execute(s.aborted_txns.insert(), [
            {"topic_id": k[0], "partition": k[1], "producer_id": a.producer_id,
             "first_offset": a.first_offset, "last_offset": a.last_offset}
            for k, a in aborted])


def drop_below(conn: sa.Connection, starts: Mapping[PartitionKey, int]) -> None:
    """Retention / DeleteRecords moved these log starts: aborted transactions whose marker
    is below the new start are no longer in the log."""
    a = s.aborted_txns.c
    for (tid, part), start in sorted(starts.items()):
        conn.execute(s.aborted_txns.delete().where(
            a.topic_id == tid, a.partition == part, a.last_offset < start))


def drop_markers(conn: sa.Connection, markers: Mapping[PartitionKey, Sequence[int]]) -> None:
    """Compaction removed these ABORT/COMMIT markers (offsets, per partition): an aborted
    transaction whose marker is gone leaves the index with it (its records went first), so
    a read_committed reader is never told of an abort whose marker it will not meet (it
    would skip the producer's later batches waiting for it)."""
    a = s.aborted_txns.c
    for (tid, part), offsets in sorted(markers.items()):
        for chunk in range(0, len(offsets), 500):
            conn.execute(s.aborted_txns.delete().where(
                a.topic_id == tid, a.partition == part,
                a.last_offset.in_(sorted(offsets)[chunk:chunk + 500])))


def aborted_transactions(
    db: Database, ranges: Sequence[tuple[str, int, int, int]],
) -> dict[tuple[str, int], list[AbortedTxn]]:
    """Per (topic, partition, from_offset, to_offset) range: the aborted transactions that
    overlap [from_offset, to_offset) (marker at or after from_offset, first offset before
    to_offset), by first offset, as Kafka's `collectAbortedTxns` gives a fetch. One
    statement for all the ranges, outside a transaction (`Database.single`)."""
    out: dict[tuple[str, int], list[AbortedTxn]] = {}
    wanted = [r for r in ranges if r[2] < r[3]]
    if not wanted:
        return out
    cols = 't.name, a."partition", a.producer_id, a.first_offset, a.last_offset'
    k = key_rows(db.pg, wanted, ("text", "integer", "bigint", "bigint"))
    with db.single() as conn:
        rows = conn.exec_driver_sql(
            f'SELECT {cols} FROM {k.source} JOIN topics AS t ON t.name = {k.cols[0]} '
            f'JOIN aborted_txns AS a ON a.topic_id = t.id AND a."partition" = {k.cols[1]} '
            f'WHERE a.last_offset >= {k.cols[2]} AND a.first_offset < {k.cols[3]}',
            k.params).all()
    for name, part, pid, first, last in sorted(rows, key=lambda r: (r[0], r[1], r[3])):
        out.setdefault((str(name), int(part)), []).append(
            AbortedTxn(int(pid), int(first), int(last)))
    return out


class AbortedIndex:
    """The aborted transactions of one partition's range, looked up by producer and offset:
    a transactional batch of producer P at offset O is aborted if one of P's aborted
    transactions spans O (a producer has one transaction open at a time, so its ranges do
    not overlap). What read_committed readers and the compactor drop."""

    def __init__(self, txns: Iterable[AbortedTxn]) -> None:
        self._by_producer: dict[int, list[tuple[int, int]]] = {}
        for a in txns:
            self._by_producer.setdefault(a.producer_id, []).append(
                (a.first_offset, a.last_offset))
        for ranges in self._by_producer.values():
            ranges.sort()

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def overlaps(self, first: int, last: int) -> bool:
        """Whether an aborted transaction spans any offset of [first, last]."""
        return any(lo <= last and hi >= first
                   for ranges in self._by_producer.values() for lo, hi in ranges)

    def aborted(self, producer_id: int, offset: int) -> bool:
        """Whether the batch of `producer_id` at `offset` belongs to an aborted transaction."""
        ranges = self._by_producer.get(producer_id)
        if not ranges:
            return False
        i = bisect.bisect_right(ranges, (offset, 1 << 63)) - 1
        return i >= 0 and ranges[i][0] <= offset <= ranges[i][1]


# A partition row's oldest open transaction (its first offset, or NULL), as a column of a
# SELECT over `partitions`: a primary-key probe of open_txns per partition row.
FIRST_UNSTABLE = (
    sa.select(sa.func.min(s.open_txns.c.first_offset))
    .where(s.open_txns.c.topic_id == s.partitions.c.topic_id,
           s.open_txns.c.partition == s.partitions.c.partition)
    .scalar_subquery().label("first_unstable")
)


def first_unstable(conn: sa.Connection) -> dict[PartitionKey, int]:
    """Per partition: the first offset of its oldest open transaction; partitions without
    one are absent (the planner's snapshot, one grouped read)."""
    o = s.open_txns.c
    query = sa.select(o.topic_id, o.partition, sa.func.min(o.first_offset)).group_by(
        o.topic_id, o.partition)
    return {(int(tid), int(part)): int(first) for tid, part, first in conn.execute(query)}
