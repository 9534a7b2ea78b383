"""Topics and their partitions: create, look up, list, delete, add partitions, alter configs.

Lock order of the changes (PostgreSQL): the topic row (FOR UPDATE), then files, then
partition rows, so they never deadlock with compaction commits (files, then partitions) or
agent commits (their own pending files, which no change locks, then topic rows FOR SHARE,
then partitions: a change waits for the commits in progress on its topic). Each is one
transaction through `Database.commit`, but for the big ones: a create or delete of more
than BATCH_PARTITIONS partitions works a batch per transaction on a hidden topic (see
`create_topic`, `delete_topic`), so no heartbeat, flush, GC or compaction commit waits
for it more than one batch (milliseconds).

Limits: a topic's name is Kafka's (`validate_topic_name`), the partitions of all topics
are at most max.partitions (`MetadataConfig`), both checked before anything is allocated,
by a validate-only create exactly as by a real one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from . import notify, txnlog
from . import schema as s
from .config import MAX_PARTITIONS
from .engine import Database, Unknown
from .errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    PartitionLimitError,
    TopicExistsError,
    UnknownTopicError,
)
from .files import lock_live_segments, retire_segments
from .models import PartitionInfo, TopicInfo
from .topicconfig import ConfigChange, TopicConfig, apply_changes, validate_configs

log = logging.getLogger(__name__)

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249
# Topics being created or deleted in several transactions are renamed to "/c/<id>" or
# "/d/<id>": no Kafka name holds a '/', so every lookup by name misses them and the name is
# free at once; enumerations filter them out with schema.VISIBLE_TOPIC.
HIDDEN = s.HIDDEN_TOPIC
CREATING = HIDDEN + "c/"
DELETING = HIDDEN + "d/"
VISIBLE = s.VISIBLE_TOPIC
# The partitions one transaction of a big create or delete handles: a small write of
# another writer (a heartbeat, a flush commit) waits for at most one such batch.
BATCH_PARTITIONS = 2_000
# A creation that has not finished this long after it began was abandoned (its process
# died): `finish_hidden` deletes it.
ABANDONED_CREATE_MS = 600_000
# pg_advisory_xact_lock key serializing the changes that add partitions ("part"), so two
# concurrent creates cannot both pass max.partitions (SQLite: the write lock does it).
PARTITIONS_LOCK_KEY = 0x70617274


def topic_info(row: sa.Row[Any]) -> TopicInfo:
    """A TopicInfo from a `topics` row."""
    configs: dict[str, str] = json.loads(row.configs)
    return TopicInfo(
        id=row.id,
        name=row.name,
        partitions=row.partitions,
        config=TopicConfig.from_map(configs),
        configs=configs,
        created_at_ms=row.created_at_ms,
    )


def validate_topic_name(name: object) -> str:
    """`name` if it is a legal topic name, else InvalidTopicError: Kafka's Topic.validate
    (1-249 characters of [a-zA-Z0-9._-], not "." or ".."). The message quotes at most the
    name's first 64 characters."""
    shown = repr(name if not isinstance(name, str) or len(name) <= 64 else name[:64] + "...")
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"invalid topic name {shown}: it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"invalid topic name {shown}: it cannot be '.' or '..'")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"invalid topic name {shown}: it can't be longer than"
                                f" {MAX_NAME_LENGTH} characters ({len(name)})")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(f"invalid topic name {shown}: it contains a character other"
                                " than ASCII alphanumerics, '.', '_' and '-'")
    return name


def _unified(name: str) -> str:
    """Kafka's Topic.unifyCollisionChars: '.' and '_' collide in metric names."""
    return name.replace(".", "_")


def _check_count(partitions: object, limit: int) -> int:
    """`partitions` if it is a partition count a topic may have, checked before anything
    is allocated for it."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise InvalidPartitionsError(f"partition count must be >= 1, got {partitions!r}")
    if partitions > limit:
        raise PartitionLimitError(
            f"{partitions} partitions exceed {MAX_PARTITIONS} ({limit}), the partitions of"
            " all topics together")
    return partitions


def _check_new(db: Database, conn: sa.Connection, name: str, added: int) -> None:
    """Refuse a new topic `name` that exists or collides with one, or `added` partitions
    the cluster has no room for (max.partitions)."""
    t = s.topics.c
    if conn.execute(sa.select(t.id).where(t.name == name)).first() is not None:
        raise TopicExistsError(f"topic {name!r} already exists")
    if "." in name or "_" in name:
        unified = _unified(name)
        for other in conn.execute(sa.select(t.name).where(
                VISIBLE, sa.func.replace(t.name, ".", "_") == unified)).scalars():
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {other!r}: '.' and '_' are"
                " the same in metric names")
    _check_room(db, conn, added)


def _check_room(db: Database, conn: sa.Connection, added: int) -> None:
    """PartitionLimitError if `added` more partitions exceed max.partitions (topics being
    created count, those being deleted do not)."""
    t = s.topics.c
    if db.pg:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(PARTITIONS_LOCK_KEY)))
    used = int(conn.execute(sa.select(sa.func.coalesce(sa.func.sum(t.partitions), 0)).where(
        sa.not_(t.name.startswith(DELETING, autoescape=True)))).scalar() or 0)
    limit = db.config.max_partitions
    if used + added > limit:
        raise PartitionLimitError(
            f"{added} more partitions would exceed {MAX_PARTITIONS} ({limit}): the cluster"
            f" has {used}")


def _insert_partitions(conn: sa.Connection, topic_id: int, first: int, end: int) -> None:
    conn.execute(s.partitions.insert(), [
        {"topic_id": topic_id, "partition": p, "log_start_offset": 0, "next_offset": 0}
        for p in range(first, end)])


def create_topic(
    db: Database, name: str, partitions: int, configs: Mapping[str, str] | None = None, *,
    validate_only: bool = False,
) -> TopicInfo:
    """Create a topic with `partitions` empty partitions; `validate_only`: check exactly
    what a create checks (name, count, configs, existence and '.'/'_' collisions, room
    under max.partitions) and create nothing (the returned TopicInfo has id 0).

    Up to BATCH_PARTITIONS partitions: one transaction (crash before COMMIT: no topic).
    More: the topic row is inserted hidden ("/c/<id>") with the first batch, the other
    partitions in a transaction per batch, and a last transaction gives it its name after
    checking again; so no other writer waits long for it. A crash in the middle leaves a
    hidden topic, invisible, which `finish_hidden` deletes once abandoned.
    """
    validate_topic_name(name)
    _check_count(partitions, db.config.max_partitions)
    stored = validate_configs(dict(configs or {}))
    encoded = json.dumps(stored, sort_keys=True)
    now = db.clock.now_ms()
    if validate_only:
        with db.read() as conn:
            _check_new(db, conn, name, partitions)
        return TopicInfo(0, name, partitions, TopicConfig.from_map(stored), stored, now)
    first = min(partitions, BATCH_PARTITIONS)
    try:
        with db.write() as conn:
            _check_new(db, conn, name, partitions)
            topic_id = s.take_next(conn, s.topic_ids)
            conn.execute(s.topics.insert().values(
                id=topic_id, name=name if first == partitions else f"{CREATING}{topic_id}",
                partitions=partitions, configs=encoded, created_at_ms=now))
            _insert_partitions(conn, topic_id, 0, first)
    except sa.exc.IntegrityError as exc:  # a concurrent creator won the unique name
        raise TopicExistsError(f"topic {name!r} already exists") from exc
    if first < partitions:
        _finish_create(db, name, topic_id, first, partitions)
    return TopicInfo(topic_id, name, partitions, TopicConfig.from_map(stored), stored, now)


def _finish_create(db: Database, name: str, topic_id: int, done: int, partitions: int) -> None:
    """Insert a hidden topic's partitions from `done` on, a batch per transaction, then
    name it; if anything fails (the name taken meanwhile), it is deleted."""
    t = s.topics.c
    hidden = f"{CREATING}{topic_id}"
    try:
        while done < partitions:
            end = min(partitions, done + BATCH_PARTITIONS)
            started = time.perf_counter()
            with db.write() as conn:
                if conn.execute(sa.select(t.id).where(t.id == topic_id, t.name == hidden)
                                .with_for_update()).first() is None:
                    raise TopicExistsError(f"the creation of topic {name!r} was abandoned")
                _insert_partitions(conn, topic_id, done, end)
            done = end
            _yield_lock(db, time.perf_counter() - started)
        with db.write() as conn:
            if conn.execute(sa.select(t.name).where(t.name == name)).first() is not None:
                raise TopicExistsError(f"topic {name!r} already exists")
            _check_new(db, conn, name, 0)
            conn.execute(s.topics.update().where(t.id == topic_id, t.name == hidden)
                         .values(name=name))
    except BaseException:
        with contextlib.suppress(Exception):
            with db.write() as conn:
                conn.execute(s.topics.update().where(t.id == topic_id, t.name == hidden)
                             .values(name=f"{DELETING}{topic_id}"))
            _finish_delete(db, topic_id)
        raise


def get_topic(db: Database, name: str) -> TopicInfo:
    """The topic called `name`; UnknownTopicError if there is none."""
    with db.read() as conn:
        row = conn.execute(sa.select(s.topics).where(s.topics.c.name == name)).first()
    if row is None:
        raise UnknownTopicError(f"unknown topic {name!r}")
    return topic_info(row)


def list_topics(db: Database) -> list[TopicInfo]:
    """All topics, by name."""
    with db.read() as conn:
        rows = conn.execute(sa.select(s.topics).where(VISIBLE).order_by(s.topics.c.name)).all()
    return [topic_info(r) for r in rows]


def partition_info(topic: str, row: Any, first_unstable: int | None = None) -> PartitionInfo:
    """A PartitionInfo from a `partitions` row (or one with its offset columns) of `topic`,
    with the first offset of its oldest open transaction, if any."""
    return PartitionInfo(topic, row.partition, row.log_start_offset, row.next_offset,
                         row.clean_offset, first_unstable)


def partitions(db: Database, topic: str, topic_id: int | None = None) -> list[PartitionInfo]:
    """The topic's partitions in order, with their log start, next and last stable offsets
    (each partition's oldest open transaction, in the same statement).
    With `topic_id`, the topic must be that row (UnknownTopicError if `topic` was deleted
    and created again since the caller resolved it: a Kafka topic id names one
    incarnation)."""
    t, p = s.topics.c, s.partitions.c
    with db.read() as conn:
        found = conn.execute(sa.select(t.id).where(t.name == topic)).scalar()
        if found is None or (topic_id is not None and found != topic_id):
            raise UnknownTopicError(f"unknown topic {topic!r}")
        topic_id = found
        rows = conn.execute(
            sa.select(p.partition, p.log_start_offset, p.next_offset, p.clean_offset,
                      txnlog.FIRST_UNSTABLE)
            .where(p.topic_id == topic_id).order_by(p.partition)
        ).all()
    return [partition_info(topic, r, r.first_unstable) for r in rows]


def partition_summaries(db: Database, topic: str) -> list[tuple[PartitionInfo, int, int, int]]:
    """Each partition of the topic in order, with its live segments from its log start on:
    (partition, segments, bytes, records). Two queries whatever the partition count, in one
    consistent snapshot (`silt topics describe`)."""
    t, p, sg = s.topics.c, s.partitions.c, s.segments.c
    with db.read(consistent=True) as conn:
        topic_id = conn.execute(sa.select(t.id).where(t.name == topic)).scalar()
        if topic_id is None:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        sums = {int(r.partition): (int(r.n), int(r.bytes), int(r.records)) for r in conn.execute(
            sa.select(sg.partition, sa.func.count().label("n"),
                      sa.func.coalesce(sa.func.sum(sg.data_len), 0).label("bytes"),
                      sa.func.coalesce(sa.func.sum(sg.record_count), 0).label("records"))
            .select_from(s.segments.join(s.partitions, sa.and_(
                p.topic_id == sg.topic_id, p.partition == sg.partition)))
            .where(sg.topic_id == topic_id, s.LIVE, sg.last_offset >= p.log_start_offset)
            .group_by(sg.partition))}
        rows = conn.execute(
            sa.select(p.partition, p.log_start_offset, p.next_offset, p.clean_offset)
            .where(p.topic_id == topic_id).order_by(p.partition)).all()
    return [(partition_info(topic, r), *sums.get(int(r.partition), (0, 0, 0))) for r in rows]


def _locked_topic(conn: sa.Connection, name: str) -> TopicInfo:
    row = conn.execute(sa.select(s.topics).where(s.topics.c.name == name)
                       .with_for_update()).first()
    if row is None:
        raise UnknownTopicError(f"unknown topic {name!r}")
    return topic_info(row)


def delete_topic(db: Database, name: str) -> TopicInfo:
    """Delete a topic; returns what it was. One short transaction hides it: the topic row
    is renamed "/d/<id>" (every lookup by name then misses it: produces, fetches and
    compactions of it are refused, and the name is free for a new topic, a new id), and
    consumer groups' committed offsets of it go (as Kafka's handleDeletedPartitions).
    `_finish_delete` then drops its data a batch of partitions per transaction: live
    segments leave the log and files left without a live segment retire
    (`files.retire_segments`: GC deletes their objects after the grace period), segment
    rows, idempotent producers' state and partitions go, then the topic row.

    Crash before the first COMMIT: the topic is intact. After: it is deleted for every
    reader; what is left of it is finished by `finish_hidden` (each compactor's GC pass,
    the next deletion). A failure while finishing is logged, not raised, for the same
    reason.
    """
    t = s.topics.c
    hidden: list[TopicInfo] = []

    def body(conn: sa.Connection) -> TopicInfo:
        hidden.clear()
        info = _locked_topic(conn, name)
        hidden.append(info)
        conn.execute(s.topics.update().where(t.id == info.id)
                     .values(name=f"{DELETING}{info.id}"))
        conn.execute(s.group_offsets.delete().where(s.group_offsets.c.topic == info.name))
        notify.announce(db, conn)  # waiting fetches of the topic answer now
        return info

    def read_back(conn: sa.Connection) -> TopicInfo | None:
        if not hidden:
            return None
        row = conn.execute(sa.select(t.name).where(t.id == hidden[0].id)).first()
        return hidden[0] if row is None or row.name != name else None

    info = db.commit(f"delete of topic {name!r}", body, read_back, kind="topics")
    try:
        _finish_delete(db, info.id)
    except Exception as exc:  # hidden already: finish_hidden completes it later
        log.warning("topic %r is deleted but its data is not dropped yet (done later): %s",
                    name, exc)
    return info


def _finish_delete(db: Database, topic_id: int) -> None:
    """Drop a hidden topic's data, BATCH_PARTITIONS partitions per transaction, then its
    row. Idempotent: each batch takes the lowest partitions left, so a repeated or
    concurrent call only continues it."""
    t = s.topics.c

    def body(conn: sa.Connection) -> bool:
        if conn.execute(sa.select(t.id).where(t.id == topic_id).with_for_update()
                        ).first() is None:
            return True
        part = s.partitions.c.partition
        last = conn.execute(
            sa.select(part).where(s.partitions.c.topic_id == topic_id).order_by(part)
            .offset(BATCH_PARTITIONS - 1).limit(1)).scalar()
        for table in (s.segments, s.producer_state, s.open_txns, s.aborted_txns,
                      s.partitions):
            chosen = table.c.topic_id == topic_id
            if last is not None:
                chosen = sa.and_(chosen, table.c.partition <= last)
            if table is s.segments:
                retire_segments(conn, lock_live_segments(conn, chosen), db.clock.now_ms())
            conn.execute(table.delete().where(chosen))
        if last is None:
            conn.execute(s.topics.delete().where(t.id == topic_id))
        return last is None

    while True:
        started = time.perf_counter()
        if db.commit(f"dropping the data of deleted topic {topic_id}", body,
                     lambda conn: None, kind="topics"):
            return
        _yield_lock(db, time.perf_counter() - started)


def _yield_lock(db: Database, held_s: float) -> None:
    """Between two batches of a big change, let other writers in. SQLite's waiters poll
    for the write lock (sleeping up to 100 ms between tries): batches back to back would
    starve them, so the change pauses as long as its batch held the lock (at most 0.1 s).
    PostgreSQL's lock queue is fair: no pause."""
    if not db.pg:
        time.sleep(min(held_s, 0.1))


def finish_hidden(db: Database) -> int:
    """Finish what crashes left of big topic changes: the data of deleted topics, and
    creations abandoned for ABANDONED_CREATE_MS (deleted). Returns how many topics it
    finished. Safe alongside anything (each batch locks the topic row)."""
    t = s.topics.c
    cutoff = db.clock.now_ms() - ABANDONED_CREATE_MS
    with db.read() as conn:
        rows = conn.execute(sa.select(t.id, t.name, t.created_at_ms).where(
            t.name.startswith(HIDDEN, autoescape=True))).all()
    done = 0
    for row in rows:
        if row.name.startswith(CREATING):
            if row.created_at_ms > cutoff:
                continue
            with db.write() as conn:
                if not conn.execute(s.topics.update().where(t.id == row.id, t.name == row.name)
                                    .values(name=f"{DELETING}{row.id}")).rowcount:
                    continue
        _finish_delete(db, int(row.id))
        done += 1
    return done


def add_partitions(db: Database, name: str, count: int, *,
                   validate_only: bool = False) -> TopicInfo:
    """Grow the topic to `count` partitions (new ones empty); returns the topic after.

    InvalidPartitionsError unless `count` exceeds the current count (Kafka's
    CreatePartitions only grows a topic), PartitionLimitError past max.partitions (checked
    before anything is allocated). `validate_only`: check, change nothing. One transaction
    through `Database.commit` (read back: the count is `count`).
    """
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidPartitionsError(f"partition count must be an integer, got {count!r}")
    _check_count(count, db.config.max_partitions)

    def body(conn: sa.Connection) -> TopicInfo:
        info = _locked_topic(conn, name)
        if count <= info.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} already has {info.partitions} partitions" if
                count == info.partitions else f"topic {name!r} has {info.partitions}"
                f" partitions, more than the requested {count}: partitions can only grow")
        _check_room(db, conn, count - info.partitions)
        if validate_only:
            return dataclasses.replace(info, partitions=count)
        _insert_partitions(conn, info.id, info.partitions, count)
        conn.execute(s.topics.update().where(s.topics.c.id == info.id)
                     .values(partitions=count))
        return dataclasses.replace(info, partitions=count)

    def read_back(conn: sa.Connection) -> TopicInfo | Unknown | None:
        row = conn.execute(sa.select(s.topics).where(s.topics.c.name == name)).first()
        if row is None:
            return Unknown(f"topic {name!r} is gone")
        return topic_info(row) if row.partitions == count else None

    return db.commit(f"partitions of topic {name!r}", body, read_back, kind="topics")


def alter_topic_configs(db: Database, name: str, changes: Sequence[ConfigChange], *,
                        validate_only: bool = False, replace: bool = False) -> TopicInfo:
    """Apply incremental config `changes` (Kafka's IncrementalAlterConfigs: SET, DELETE,
    APPEND, SUBTRACT) to the topic's overrides; returns the topic after. With `replace`
    they apply to no overrides, so every override they do not set is gone (the legacy
    AlterConfigs' full replacement).

    The new map is validated as `create_topic` validates one (`topicconfig.apply_changes`),
    computed from the overrides read under the topic's row lock, so concurrent alters
    compose. InvalidConfigError commits nothing; `validate_only` changes nothing.

    Adding `compact` to the cleanup.policy of a topic with live records written without
    key hashes (under the delete policy) is InvalidConfigError: the compactor deduplicates
    by the hashes stored with each chunk, so those records would never be compacted (and
    no merge holding them would be). Once they are gone (retention, DeleteRecords), it may.
    """
    t = s.topics.c
    after: list[TopicInfo] = []

    def body(conn: sa.Connection) -> TopicInfo:
        after.clear()
        info = _locked_topic(conn, name)
        stored = apply_changes({} if replace else info.configs, changes)
        config = TopicConfig.from_map(stored)
        if config.compacted and not info.config.compacted and _holds_unhashed(conn, info):
            raise InvalidConfigError(
                f"cannot add 'compact' to the cleanup.policy of topic {name!r}: it holds"
                " records written under the delete policy, without the key hashes"
                " compaction needs; create a compacted topic and copy them there, or"
                " delete them first (DeleteRecords)")
        after.append(dataclasses.replace(info, config=config, configs=stored))
        if not validate_only:
            conn.execute(s.topics.update().where(t.id == info.id)
                         .values(configs=json.dumps(stored, sort_keys=True)))
        return after[0]

    def read_back(conn: sa.Connection) -> TopicInfo | Unknown | None:
        row = conn.execute(sa.select(s.topics).where(t.name == name)).first()
        if row is None or not after:
            return Unknown(f"topic {name!r} is gone")
        # The same overrides: applied (or equal anyway, which is as good).
        return after[0] if json.loads(row.configs) == dict(after[0].configs) else None

    return db.commit(f"configs of topic {name!r}", body, read_back, kind="topics")


def _holds_unhashed(conn: sa.Connection, info: TopicInfo) -> bool:
    """Whether a live segment of the topic has records without key hashes (delete-policy
    chunks store none; a compacted topic's store one per record)."""
    sg = s.segments.c
    found = conn.execute(sa.select(sg.id).where(
        sg.topic_id == info.id, s.LIVE, sg.hash_count < sg.record_count).limit(1)).first()
    return found is not None
