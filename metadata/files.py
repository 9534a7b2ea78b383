"""Objects' rows: register before upload, the agent commits that make chunks visible
(assigning offsets), abandon, and GC's state transitions.

Lock order of an agent commit (PostgreSQL): the file rows (id order), the topic rows FOR
SHARE (id order: a topic change's FOR UPDATE waits for the commits in progress, and a commit
for a topic being deleted waits, then finds it gone), then the partition rows in sorted
(topic_id, partition) order, so committers touching overlapping partitions serialize per
partition and cannot deadlock. Idempotent producers' state (producers.py) is checked and
updated in the same transaction, after the partition locks: a chunk holding a duplicate or
out-of-order batch, or of a topic or partition deleted since the agent buffered it, is not
inserted (`commit_produced`); the rest of the agent's object commits. The partitions' open
transactions and aborted-transaction index (txnlog.py) change with the batches that
open and end them, in the same transaction.

Failure model of a commit: `Database.commit` (engine.py), read back through the files'
states (a file id is its commit's stable identity).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any, cast

import sqlalchemy as sa

from fileformat import FileLayout, ObjectLayout

from . import notify, producers, txnlog
from . import schema as s
from .engine import Database, Unknown, pg_arrays
from .errors import (
    BatchRejectedError,
    FileStateError,
    InvalidCommitError,
    MetadataError,
    ObjectKeyExistsError,
    UnknownFileError,
    UnknownPartitionError,
    UnknownTopicError,
)
from .models import (
    AbortedTxn,
    ChunkMeta,
    FileInfo,
    ProducerBatch,
    ProducerState,
    RejectedChunk,
)
from .segments import check_segment, chunk_meta, insert_segments, segment_row

# A written object's layout as its file row records it: the fields of
# `fileformat.ObjectLayout` (the one definition; a FileLayout is one), `files` columns of the
# same name (not the META CRC and chunks, whose chunks become segment rows).
LAYOUT_COLUMNS = tuple(f.name for f in dataclasses.fields(ObjectLayout))
if not set(LAYOUT_COLUMNS) <= set(s.files.c.keys()):
    raise AssertionError(f"files columns do not hold ObjectLayout's {LAYOUT_COLUMNS}")
_layout_values = attrgetter(*LAYOUT_COLUMNS)

# One file of a commit, as `_commit` takes it: its id, its layout's columns, its chunks.
FileCommit = tuple[int, Mapping[str, int], Sequence[ChunkMeta]]
Bases = dict[tuple[str, int], int]
# Per chunk of a produced file: its base offset, or why it was not inserted.
Outcomes = dict[tuple[str, int], "int | RejectedChunk"]
# Per chunk (topic, partition): its idempotent batches, in offset order.
ProducerBatches = Mapping[tuple[str, int], Sequence[ProducerBatch]]
# Extra statements an agent commit runs in its transaction, after the chunks are inserted,
# given the connection and the chunks' outcomes (a transaction coordinator completing the
# transactions whose markers the file holds: transactions.complete_in). A hook must not
# raise for a state that moved on: its exception rolls the whole commit back.
CommitHook = Callable[[sa.Connection, "Outcomes"], object]


# The `files` columns a FileInfo holds besides its layout (not the snapshot's change marker).
_INFO_COLUMNS = tuple(c for c in s.files.c
                      if c.name != "segments_version" and c.name not in LAYOUT_COLUMNS)
_LAYOUT_OF_ROW = tuple(s.files.c[name] for name in LAYOUT_COLUMNS)


def layout_columns(layout: FileLayout, what: str) -> dict[str, int]:
    """The `files` columns a committed object's layout sets; InvalidCommitError (naming
    `what`) if one is negative."""
    values = dict(zip(LAYOUT_COLUMNS, _layout_values(layout), strict=True))
    if min(values.values()) < 0:
        raise InvalidCommitError(f"{what}: negative layout field")
    return values


def _file_commit(file_id: int, layout: FileLayout) -> FileCommit:
    return (file_id, layout_columns(layout, f"file {file_id}"),
            [chunk_meta(c) for c in layout.chunks])


def file_info(row: sa.Row[Any], leased: bool = False) -> FileInfo:
    """A FileInfo from a `files` row (its layout None while the file is pending)."""
    m = row._mapping
    values = [m[c] for c in _LAYOUT_OF_ROW]
    layout = (None if values[0] is None
              else ObjectLayout(**dict(zip(LAYOUT_COLUMNS, values, strict=True))))
    return FileInfo(**{c.name: m[c] for c in _INFO_COLUMNS}, layout=layout, leased=leased)


def lock_files(conn: sa.Connection, ids: Sequence[int]) -> list[sa.Row[Any]]:
    """The file rows, locked in id order (PostgreSQL; SQLite holds the write lock)."""
    if not ids:
        return []
    f = s.files.c
    return list(conn.execute(
        sa.select(s.files).where(f.id.in_(ids)).order_by(f.id).with_for_update()).all())


def held_jobs(conn: sa.Connection, job_ids: Sequence[int], now: int) -> set[int]:
    """Which of these jobs are leased and unexpired (the files they name are held)."""
    if not job_ids:
        return set()
    j = s.jobs.c
    return {int(r) for r in conn.execute(
        sa.select(j.id).where(j.id.in_(set(job_ids)), j.state == s.JOB_LEASED,
                              j.lease_expires_ms > now)).scalars()}


def retire_segments(conn: sa.Connection, segments: Sequence[Any], now: int) -> list[int]:
    """Take `segments` (rows with `id` and `file_id`) out of the live log and retire the files
    left without a live segment, so GC deletes their objects after its grace period (readers
    in flight finish): the one way retention, DeleteRecords and topic deletion drop data.
    Callers hold the files' row locks. Returns the retired file ids."""
    sg, f = s.segments.c, s.files.c
    dead = sorted({int(r.id) for r in segments})
    for i in range(0, len(dead), 500):
        conn.execute(s.segments.update().where(sg.id.in_(dead[i:i + 500])).values(live=False))
    touched = sorted({int(r.file_id) for r in segments})
    if not touched:
        return []
    still = {int(x) for x in conn.execute(
        sa.select(sg.file_id).where(sg.file_id.in_(touched), s.LIVE).distinct()).scalars()}
    emptied = [fid for fid in touched if fid not in still]
    if still:  # their live segments changed: snapshots reread them (schema v5)
        conn.execute(s.files.update().where(f.id.in_(sorted(still)))
                     .values(segments_version=f.segments_version + 1))
    if emptied:
        conn.execute(s.files.update().where(f.id.in_(emptied), f.state == s.FILE_LIVE)
                     .values(state=s.FILE_RETIRED, state_changed_at_ms=now, job_id=None))
    return emptied


def lock_live_segments(conn: sa.Connection, where: Any) -> list[Any]:
    """The live segments matching `where` (id, file_id, topic_id, partition, offsets,
    counts), their files locked (id order first, then any a compaction swapped in
    meanwhile: PostgreSQL; SQLite holds the write lock), so they stay live until COMMIT."""
    sg = s.segments.c
    query = (sa.select(sg.id, sg.file_id, sg.topic_id, sg.partition, sg.base_offset,
                       sg.last_offset, sg.record_count, sg.data_len)
             .where(where, s.LIVE).order_by(sg.topic_id, sg.partition, sg.last_offset))
    locked: set[int] = set()
    while True:
        rows = list(conn.execute(query).all())
        missing = sorted({int(r.file_id) for r in rows} - locked)
        if not missing:
            return rows
        lock_files(conn, missing)
        locked.update(missing)


def register_pending_file(
    db: Database, object_key: str, *, level: int = 0, holds_compacted: bool = False
) -> int:
    """Record that `object_key` may be uploaded; returns the file id for `commit_file`.

    Call before the upload. Crash before COMMIT: no row and (the caller not having
    uploaded yet) no object. After: a pending row that GC removes, with its object if any,
    once it is older than the GC grace period.
    """
    now = db.clock.now_ms()
    try:
        with db.write() as conn:
            return int(conn.execute(
                s.files.insert().values(
                    object_key=object_key, level=level, state=s.FILE_PENDING,
                    holds_compacted=holds_compacted, created_at_ms=now,
                    state_changed_at_ms=now,
                ).returning(s.files.c.id)
            ).scalar_one())
    except sa.exc.IntegrityError as exc:
        raise ObjectKeyExistsError(f"object key {object_key!r} is already registered") from exc


def commit_file(db: Database, file_id: int, layout: FileLayout) -> dict[tuple[str, int], int]:
    """Make an uploaded object's chunks visible, assigning offsets; returns their bases.

    One transaction: flip the file pending → live (locking its row), lock the partitions
    in sorted order, give each chunk the base offset `next_offset` and advance it by
    `offset_span`, insert the segments. Validation failures (FileStateError,
    UnknownTopicError, UnknownPartitionError, InvalidCommitError) commit nothing.

    Crash before COMMIT: the file stays pending (GC deletes it); after: everything visible.
    Database errors are handled by `Database.commit`: retried, then CommitConflictError; a
    failed COMMIT is read back (live: applied, the assigned bases are returned; pending:
    not applied, retried).
    """
    # Not a produced file: no chunk is rejected, every outcome is a base offset.
    return cast(Bases, _commit(db, f"commit of file {file_id}",
                               [_file_commit(file_id, layout)])[0])


def commit_produced(db: Database, file_id: int, layout: FileLayout, *,
                    batches: ProducerBatches, hooks: Sequence[CommitHook] = ()) -> Outcomes:
    """`commit_file` for an agent's object (its idempotent and transactional producers'
    batches and markers per chunk, possibly none), committing chunk by chunk: in the same
    transaction, after the partition locks, every chunk's `batches` are checked in order
    against their producers' state and open transactions (producers.py `check_chunk`), the
    state advanced, transactions opened and ended (an ABORT indexed: txnlog.py).

    A chunk that cannot be stored is not inserted (its bytes are dead space in the object,
    dropped by the next compaction of the file) and does not consume offsets; its outcome
    is a RejectedChunk: a chunk with a duplicate or out-of-order batch (duplicates answered
    with their original offsets), a chunk whose topic or partition is gone (deleted by
    an admin since the agent buffered it: UnknownTopicError / UnknownPartitionError for all
    of it), or a chunk whose `batches` are malformed (a producer id, epoch or sequence out
    of range, batches overlapping or past the chunk: InvalidCommitError for all of it, so
    one client's bad batch never fails the others'). Other chunks commit normally. If no
    chunk is inserted the file goes pending → abandoned (GC deletes it) instead of live.

    `hooks` run last in the same transaction, with the outcomes (CommitHook).

    Crash before COMMIT: the file stays pending, no state changed. After: the chunks, the
    producers' states and what the hooks wrote are visible together. A failed COMMIT is
    read back through the file's state: pending (retried), live or abandoned (applied;
    chunks without a segment are reported rejected with a retriable BatchRejectedError,
    since their exact verdicts are not stored — a retry of a duplicate is then answered with
    its original offset, one of a deleted topic with UNKNOWN_TOPIC_OR_PARTITION).
    """
    commit = _file_commit(file_id, layout)
    spans = {(c.topic, c.partition): c.offset_span for c in commit[2]}
    refused: dict[tuple[str, int], RejectedChunk] = {}
    for tp, bs in batches.items():
        if tp not in spans:
            raise InvalidCommitError(f"producer batches for {tp[0]}/{tp[1]}, not in the file")
        try:
            producers.validate_batches(spans[tp], bs, f"chunk {tp[0]}/{tp[1]}")
        except InvalidCommitError as exc:  # this chunk only: the others commit
            refused[tp] = RejectedChunk((exc,) * len(bs), exc)
    return _commit(db, f"commit of file {file_id}", [commit], batches, produced=True,
                   refused=refused, hooks=hooks)[0]


def commit_files(db: Database, files: Sequence[tuple[int, FileLayout]]
                 ) -> list[dict[tuple[str, int], int]]:
    """Commit several uploaded objects, (file_id, layout) each, in ONE transaction (all
    visible, or none). Offsets are assigned file after file, in the order given. Used by
    writers that must publish a whole job at once (Spark). Failures commit nothing; errors
    as for `commit_file` (a failed COMMIT is read back through all the files' states).
    """
    return cast(list[Bases], _commit(db, f"commit of {len(files)} files",
                                     [_file_commit(i, layout) for i, layout in files]))


def last_sink_batch(db: Database, sink: str) -> int | None:
    """The last micro-batch id the streaming sink `sink` committed, or None."""
    with db.read() as conn:
        found = conn.execute(sa.select(s.stream_sinks.c.batch_id)
                             .where(s.stream_sinks.c.sink == sink)).scalar()
    return None if found is None else int(found)


def commit_sink_batch(db: Database, sink: str, batch_id: int,
                      files: Sequence[tuple[int, FileLayout]]) -> list[Bases] | None:
    """A streaming sink's micro-batch: its objects committed as `commit_files` commits them
    (all or none), in the ONE transaction that records `batch_id` as the sink's last
    (`stream_sinks`, schema v12). A batch id at or below the recorded one was committed
    before (Spark replays the last batch after a driver failure): nothing is committed and
    the answer is None (the caller abandons the new objects). A batch without objects is
    recorded all the same. A failed COMMIT is read back through the sink's row and the
    files' states; a retry re-checks the row, so a batch never commits twice."""
    if not 0 < len(sink) <= s.SINK_ID_MAX:
        raise InvalidCommitError(f"a sink id has 1 to {s.SINK_ID_MAX} characters")
    commits = [_file_commit(i, layout) for i, layout in files]
    for _, _, chunks in commits:
        _validate_chunks(chunks)
    ids = [i for i, _ in files]
    k = s.stream_sinks.c

    def last(conn: sa.Connection, lock: bool) -> int | None:
        query = sa.select(k.batch_id).where(k.sink == sink)
        found = conn.execute(query.with_for_update() if lock else query).scalar()
        return None if found is None else int(found)

    def body(conn: sa.Connection) -> list[Bases] | None:
        done = last(conn, lock=True)
        if done is not None and batch_id <= done:
            return None
        now = db.clock.now_ms()
        if done is None:
            conn.execute(s.stream_sinks.insert().values(sink=sink, batch_id=batch_id,
                                                        committed_at_ms=now))
        else:
            conn.execute(s.stream_sinks.update().where(k.sink == sink).values(
                batch_id=batch_id, committed_at_ms=now))
        if not commits:
            return []
        return cast(list[Bases], _commit_body(db, conn, commits, None, False, {}))

    def read_back(conn: sa.Connection) -> list[Bases] | Unknown | None:
        done = last(conn, lock=False)
        states = dict(conn.execute(sa.select(s.files.c.id, s.files.c.state)
                                   .where(s.files.c.id.in_(ids))).all())
        if done is None or done < batch_id:
            return None  # not applied
        if ids and all(states.get(i) == s.FILE_PENDING for i in ids):
            return None  # another commit took the batch: the retry finds it done
        if not all(states.get(i) == s.FILE_LIVE for i in ids):
            return Unknown(", ".join(f"file {i} is now {states.get(i)}" for i in ids))
        sg = s.segments.c
        found: dict[int, Bases] = {i: {} for i in ids}
        for r in conn.execute(
            sa.select(sg.file_id, s.topics.c.name, sg.partition, sg.base_offset)
            .join(s.topics, s.topics.c.id == sg.topic_id).where(sg.file_id.in_(ids))
        ):
            found[r.file_id][(r.name, r.partition)] = r.base_offset
        return [found[i] for i in ids]

    return db.commit(f"commit of batch {batch_id} of sink {sink!r} ({len(files)} files)",
                     body, read_back, kind="files")


def _commit(db: Database, what: str, files: Sequence[FileCommit],
            batches: ProducerBatches | None = None, *, produced: bool = False,
            refused: Mapping[tuple[str, int], RejectedChunk] | None = None,
            hooks: Sequence[CommitHook] = ()) -> list[Outcomes]:
    """Commit `files` at once; `produced` (one agent's file): chunk by chunk (see
    `commit_produced`; `refused` chunks are not inserted), else all or nothing."""
    for _, _, chunks in files:
        _validate_chunks(chunks)
    ids = [file_id for file_id, _, _ in files]
    # Applied states: live, or abandoned when a produced file had every chunk rejected.
    applied = (s.FILE_LIVE, s.FILE_ABANDONED) if produced else (s.FILE_LIVE,)

    def read_back(conn: sa.Connection) -> list[Outcomes] | Unknown | None:
        f, sg = s.files.c, s.segments.c
        states = dict(conn.execute(sa.select(f.id, f.state).where(f.id.in_(ids))).all())
        if all(states.get(i) == s.FILE_PENDING for i in ids):
            return None
        if not all(states.get(i) in applied for i in ids):
            return Unknown(", ".join(f"file {i} is now {states.get(i)}" for i in ids))
        found: dict[int, Outcomes] = {i: {} for i in ids}
        for r in conn.execute(
            sa.select(sg.file_id, s.topics.c.name, sg.partition, sg.base_offset)
            .join(s.topics, s.topics.c.id == sg.topic_id).where(sg.file_id.in_(ids))
        ):
            found[r.file_id][(r.name, r.partition)] = r.base_offset
        for file_id, _, chunks in files:
            for c in chunks:
                tp = (c.topic, c.partition)
                if tp not in found[file_id]:  # rejected: only a produced file's chunk
                    retry = BatchRejectedError(f"{c.topic}/{c.partition} was not stored;"
                                               " its verdict was lost with the COMMIT reply")
                    n = len(batches.get(tp, ())) if batches else 0
                    found[file_id][tp] = RejectedChunk((retry,) * n, retry)
        return [found[i] for i in ids]

    def body(conn: sa.Connection) -> list[Outcomes]:
        results = _commit_body(db, conn, files, batches, produced, refused or {})
        for hook in hooks:
            hook(conn, results[0])
        return results

    return db.commit(what, body, read_back, kind="files")


def _commit_body(db: Database, conn: sa.Connection, files: Sequence[FileCommit],
                 batches: ProducerBatches | None, produced: bool,
                 refused: Mapping[tuple[str, int], RejectedChunk]) -> list[Outcomes]:
    f, t = s.files.c, s.topics.c
    now = db.clock.now_ms()
    # 1. pending → live, taking the file row locks (a concurrent abandon/GC waits).
    for file_id, layout, _ in sorted(files, key=lambda x: x[0]):
        flipped = conn.execute(
            s.files.update()
            .where(f.id == file_id, f.state == s.FILE_PENDING)
            .values(state=s.FILE_LIVE, state_changed_at_ms=now, **layout)
        ).rowcount
        if flipped != 1:
            state = conn.execute(sa.select(f.state).where(f.id == file_id)).scalar()
            if state is None:
                raise UnknownFileError(f"no file with id {file_id}")
            raise FileStateError(f"file {file_id} is {state}, not pending: cannot commit")
    all_chunks = [c for _, _, chunks in files for c in chunks]
    # 2. resolve topic names, their rows locked FOR SHARE (in id order): a topic is not
    #    deleted under a commit (delete_topic's FOR UPDATE waits, then retires what it added).
    names = sorted({c.topic for c in all_chunks})
    ids = {r.name: r.id for r in conn.execute(sa.select(t.id, t.name).where(t.name.in_(names))
                                              .order_by(t.id).with_for_update(read=True))}
    for name in names:
        if name not in ids and not produced:
            raise UnknownTopicError(f"unknown topic {name!r}")
    # 3. lock the partition rows in sorted (topic_id, partition) order. A produced file's
    #    chunks of topics or partitions gone since are rejected, the others committed.
    wanted = sorted({(ids[c.topic], c.partition) for c in all_chunks if c.topic in ids})
    next_offset = lock_partitions(db, conn, wanted)
    gone: dict[tuple[str, int], RejectedChunk] = {}
    for c in all_chunks:
        error: MetadataError
        if c.topic not in ids:
            error = UnknownTopicError(f"unknown topic {c.topic!r}")
        elif (ids[c.topic], c.partition) not in next_offset:
            error = UnknownPartitionError(f"topic {c.topic!r} has no partition {c.partition}")
        else:
            continue
        if not produced:
            raise error
        tp = (c.topic, c.partition)
        n = len(batches.get(tp, ())) if batches else 0  # one answer per idempotent batch
        gone[tp] = RejectedChunk((error,) * n, error)
    for tp, rejected in refused.items():
        gone.setdefault(tp, rejected)  # malformed producer batches: as if gone
    # 4. idempotent producers' state on these partitions (their rows are guarded by the
    #    partition locks just taken).
    states: dict[tuple[int, int], dict[int, ProducerState]] = {}  # partition -> pid -> state
    if batches:
        for (pid, *k), st in producers.load_states(db, conn, (
                (b.producer_id, ids[tp[0]], tp[1]) for tp, bs in batches.items()
                if tp not in gone for b in bs)).items():
            states.setdefault((k[0], k[1]), {})[pid] = st
    # ... and their open transactions there (txnlog.py).
    open_before = txnlog.load_open(db, conn, (
        (b.producer_id, ids[tp[0]], tp[1]) for tp, bs in (batches or {}).items()
        if tp not in gone for b in bs))
    open_by_partition: dict[tuple[int, int], dict[int, int]] = {}
    for (pid, *k), first in open_before.items():
        open_by_partition.setdefault((k[0], k[1]), {})[pid] = first
    open_after = dict(open_before)
    aborted: list[tuple[tuple[int, int], AbortedTxn]] = []
    changed: dict[producers.StateKey, ProducerState] = {}
    expiration = db.config.producer_id_expiration_ms
    # 5. check each chunk's batches, assign offsets and insert segments, file after file.
    results: list[Outcomes] = []
    rows = []
    for file_id, _, chunks in files:
        outcomes: Outcomes = {}
        inserted = 0
        for c in chunks:
            tp = (c.topic, c.partition)
            if tp in gone:
                outcomes[tp] = gone[tp]  # no segment, no offsets consumed
                continue
            key = (ids[c.topic], c.partition)
            base = next_offset[key]
            if batches and tp in batches:
                was_open = open_by_partition.get(key, {})
                verdict = producers.check_chunk(states.get(key, {}), batches[tp], base, now,
                                                expiration, was_open)
                if isinstance(verdict, RejectedChunk):
                    outcomes[tp] = verdict  # no segment, no offsets consumed
                    continue
                for pid, st in verdict.states.items():
                    changed[(pid, *key)] = st
                for pid in was_open:
                    open_after.pop((pid, *key), None)
                for pid, first in verdict.open_txns.items():
                    open_after[(pid, *key)] = first
                aborted += [(key, a) for a in verdict.aborted]
            next_offset[key] = base + c.offset_span
            outcomes[tp] = base
            inserted += 1
            rows.append(segment_row(c, file_id, key[0], base, base + c.offset_span - 1, now,
                                    None))
        if not inserted:  # every chunk rejected: nothing references the object
            conn.execute(s.files.update().where(f.id == file_id).values(
                state=s.FILE_ABANDONED, state_changed_at_ms=now))
        results.append(outcomes)
    insert_segments(conn, db.pg, rows)
    _set_next_offsets(db, conn, sorted(next_offset.items()))
    producers.save_states(db, conn, changed)
    txnlog.save_changes(conn, open_before, open_after, aborted)
    if rows:
        notify.announce(db, conn)  # long-polling fetches of every agent re-read
    return results


def _validate_chunks(chunks: Sequence[ChunkMeta]) -> None:
    if not chunks:
        raise InvalidCommitError("a committed file must hold at least one chunk")
    seen: set[tuple[str, int]] = set()
    for c in chunks:
        tp = (c.topic, c.partition)
        if tp in seen:
            raise InvalidCommitError(f"two chunks for {c.topic}/{c.partition} in one file")
        seen.add(tp)
        if c.offset_span < 1 or not 0 <= c.record_count <= c.offset_span:
            raise InvalidCommitError(
                f"chunk {c.topic}/{c.partition}: need 0 <= record_count={c.record_count}"
                f" <= offset_span={c.offset_span} and offset_span >= 1"
            )
        check_segment(c, f"chunk {c.topic}/{c.partition}")


def lock_partitions(db: Database, conn: sa.Connection, wanted: Sequence[tuple[int, int]],
                    *, share: bool = False) -> dict[tuple[int, int], int]:
    """Lock the (topic_id, partition) rows in sorted order; their next offsets (a missing
    partition is absent). FOR UPDATE to advance them, or with `share` FOR KEY SHARE (what
    a foreign key's check took, compaction commits): no partition row is deleted under the
    segments a transaction inserts for it. `segments` has no foreign keys since schema v16;
    a topic's deletion (topics._finish_delete) also waits for the commits writing it: agent
    commits hold its topic row FOR SHARE, compaction commits their input files, both of
    which it locks before deleting segments and partitions.

    One statement driven by the wanted keys (primary-key probes), passed as arrays
    (PostgreSQL: unnest, rows locked in key order) or one JSON text (SQLite: json_each; the
    write transaction already holds the database lock) rather than a thousand-placeholder
    IN list, whose compiling and parsing dominated agent commits.
    """
    if db.pg:
        mode = "KEY SHARE" if share else "UPDATE"
        rows = conn.exec_driver_sql(
            'SELECT p.topic_id, p."partition", p.next_offset FROM partitions AS p '
            'JOIN unnest(%s::bigint[], %s::integer[]) AS v(t, q) '
            'ON p.topic_id = v.t AND p."partition" = v.q '
            f'ORDER BY p.topic_id, p."partition" FOR {mode} OF p',
            pg_arrays(([k[0] for k in wanted], [k[1] for k in wanted]),
                      ("bigint", "integer"))).all()
    else:
        rows = conn.exec_driver_sql(
            'SELECT p.topic_id, p."partition", p.next_offset FROM json_each(?) AS j '
            'JOIN partitions AS p ON p.topic_id = json_extract(j.value, \'$[0]\') '
            'AND p."partition" = json_extract(j.value, \'$[1]\')',
            (json.dumps(wanted),)).all()
    return {(int(r[0]), int(r[1])): int(r[2]) for r in rows}


def _set_next_offsets(db: Database, conn: sa.Connection,
                      items: Sequence[tuple[tuple[int, int], int]]) -> None:
    """partitions.next_offset for ((topic_id, partition), next_offset) pairs, in one
    driver call (see `segments.insert_segments`); the rows are already locked."""
    if not items:
        return
    if db.pg:
        conn.exec_driver_sql(
            'UPDATE partitions AS p SET next_offset = v.n FROM unnest('
            '%s::bigint[], %s::integer[], %s::bigint[]) AS v(t, q, n) '
            'WHERE p.topic_id = v.t AND p."partition" = v.q',
            pg_arrays(([k[0] for k, _ in items], [k[1] for k, _ in items],
                       [n for _, n in items]), ("bigint", "integer", "bigint")))
    else:
        conn.exec_driver_sql(
            'UPDATE partitions SET next_offset = ? WHERE topic_id = ? AND "partition" = ?',
            [(n, k[0], k[1]) for k, n in items])


def abandon_file(db: Database, file_id: int) -> None:
    """Mark a pending file abandoned: its commit will not happen; GC deletes the object.

    Idempotent for files already abandoned, deleting or deleted; FileStateError if live.
    Crash before COMMIT: the file stays pending, which GC treats the same way.
    """
    f = s.files.c
    with db.write() as conn:
        state = conn.execute(
            sa.select(f.state).where(f.id == file_id).with_for_update()).scalar()
        if state is None:
            raise UnknownFileError(f"no file with id {file_id}")
        if state == s.FILE_LIVE:
            raise FileStateError(f"file {file_id} is live: cannot abandon a committed file")
        if state == s.FILE_PENDING:
            conn.execute(s.files.update().where(f.id == file_id, f.state == s.FILE_PENDING)
                         .values(state=s.FILE_ABANDONED,
                                 state_changed_at_ms=db.clock.now_ms()))


def get_file(db: Database, file_id: int) -> FileInfo:
    """One file's row; UnknownFileError if missing."""
    with db.read() as conn:
        row = conn.execute(sa.select(s.files).where(s.files.c.id == file_id)).first()
        if row is None:
            raise UnknownFileError(f"no file with id {file_id}")
        held = held_jobs(conn, [] if row.job_id is None else [row.job_id], db.clock.now_ms())
    return file_info(row, leased=row.job_id in held)


def files_to_gc(db: Database, older_than_ms: int) -> list[FileInfo]:
    """Files whose objects may be deleted: pending, abandoned, deleting and retired files
    whose state changed at or before `older_than_ms`.

    Pass `now - grace` (compactor default 60 s, like Kafka's file.delete.delay.ms): a
    pending file younger than that may still be uploading, and a file retired by a
    compaction more recently may still be read by a reader that found its segments
    before the swap. A retired file is never listed before the grace has passed.
    """
    f = s.files.c
    gc_states = (s.FILE_PENDING, s.FILE_ABANDONED, s.FILE_DELETING, s.FILE_RETIRED)
    with db.read() as conn:
        rows = conn.execute(
            sa.select(s.files)
            .where(f.state.in_(gc_states), f.state_changed_at_ms <= older_than_ms)
            .order_by(f.id)
        ).all()
    return [file_info(r) for r in rows]


def mark_deleting(db: Database, file_ids: Iterable[int]) -> list[int]:
    """GC step 1: pending/abandoned/retired → deleting (a late commit then fails cleanly).

    Pass ids from `files_to_gc` (which applies the grace period). Returns the ids that are
    now deleting; delete only their objects (step 2). Live files are never touched.
    Crash before COMMIT: nothing changed; after: the files are listed by `files_to_gc`
    until `mark_deleted`.
    """
    return _transition(
        db, file_ids, (s.FILE_PENDING, s.FILE_ABANDONED, s.FILE_DELETING, s.FILE_RETIRED),
        s.FILE_DELETING)


def mark_deleted(db: Database, file_ids: Iterable[int]) -> list[int]:
    """GC step 3, after the objects are gone: deleting/abandoned/pending → deleted.

    Returns the ids changed (live files are never touched). Crash before COMMIT: the files
    are listed again and their (already deleted) objects deleted again, harmlessly.
    """
    return _transition(db, file_ids, (s.FILE_PENDING, s.FILE_ABANDONED, s.FILE_DELETING),
                       s.FILE_DELETED)


def _transition(db: Database, file_ids: Iterable[int], from_states: Sequence[str],
                to_state: str) -> list[int]:
    ids = sorted(set(file_ids))
    if not ids:
        return []
    f = s.files.c
    with db.write() as conn:
        changed = conn.execute(
            s.files.update()
            .where(f.id.in_(ids), f.state.in_(from_states))
            .values(state=to_state, state_changed_at_ms=db.clock.now_ms())
            .returning(f.id)
        ).scalars().all()
    return sorted(int(i) for i in changed)
