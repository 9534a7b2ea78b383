"""Topics and their partitions: create, look up, list, delete, add partitions, alter configs.

Lock order of the changes (PostgreSQL): the topic row (FOR UPDATE), then files, then
partition rows, so they never deadlock with compaction commits (files, then partitions) or
agent commits (their own pending files, which no change locks, then topic rows FOR SHARE,
then partitions: a change waits for the commits in progress on its topic). Each is one
transaction through `Database.commit`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from . import notify
from . import schema as s
from .engine import Database, Unknown
from .errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from .files import lock_live_segments, retire_segments
from .models import PartitionInfo, TopicInfo
from .topicconfig import ConfigChange, TopicConfig, apply_changes, validate_configs

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


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


def create_topic(
    db: Database, name: str, partitions: int, configs: Mapping[str, str] | None = None
) -> TopicInfo:
    """Create a topic with `partitions` empty partitions, in one transaction.

    Crash before COMMIT: no topic. After: the topic and all its partitions exist.
    """
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidTopicError(
            f"invalid topic name {name!r}: 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
        )
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise InvalidPartitionsError(f"partition count must be >= 1, got {partitions!r}")
    stored = validate_configs(dict(configs or {}))
    now = db.clock.now_ms()
    try:
        with db.write() as conn:
            exists = conn.execute(
                sa.select(s.topics.c.id).where(s.topics.c.name == name)
            ).first()
            if exists is not None:
                raise TopicExistsError(f"topic {name!r} already exists")
            topic_id = s.take_next(conn, s.topic_ids)
            conn.execute(s.topics.insert().values(
                id=topic_id, name=name, partitions=partitions,
                configs=json.dumps(stored, sort_keys=True), created_at_ms=now))
            conn.execute(s.partitions.insert(), [
                {"topic_id": topic_id, "partition": p, "log_start_offset": 0,
                 "next_offset": 0}
                for p in range(partitions)
            ])
    except sa.exc.IntegrityError as exc:  # a concurrent creator won the unique name
        raise TopicExistsError(f"topic {name!r} already exists") from exc
    return TopicInfo(topic_id, name, partitions, TopicConfig.from_map(stored), stored, now)


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
        rows = conn.execute(sa.select(s.topics).order_by(s.topics.c.name)).all()
    return [topic_info(r) for r in rows]


def partition_info(topic: str, row: Any) -> PartitionInfo:
    """A PartitionInfo from a `partitions` row (or one with its offset columns) of `topic`."""
    return PartitionInfo(topic, row.partition, row.log_start_offset, row.next_offset,
                         row.clean_offset)


def partitions(db: Database, topic: str) -> list[PartitionInfo]:
    """The topic's partitions in order, with their log start and next offsets."""
    t, p = s.topics.c, s.partitions.c
    with db.read() as conn:
        topic_id = conn.execute(sa.select(t.id).where(t.name == topic)).scalar()
        if topic_id is None:
            raise UnknownTopicError(f"unknown topic {topic!r}")
        rows = conn.execute(
            sa.select(p.partition, p.log_start_offset, p.next_offset, p.clean_offset)
            .where(p.topic_id == topic_id).order_by(p.partition)
        ).all()
    return [partition_info(topic, r) for r in rows]


def _locked_topic(conn: sa.Connection, name: str) -> TopicInfo:
    row = conn.execute(sa.select(s.topics).where(s.topics.c.name == name)
                       .with_for_update()).first()
    if row is None:
        raise UnknownTopicError(f"unknown topic {name!r}")
    return topic_info(row)


def delete_topic(db: Database, name: str) -> TopicInfo:
    """Delete a topic; returns what it was. Its live segments leave the log and files left
    without a live segment retire (`files.retire_segments`: GC deletes their objects after
    the grace period), then its segment rows, idempotent producers' state, partitions,
    consumer groups' committed offsets of it (as Kafka's handleDeletedPartitions) and topic
    row go. A compaction job holding its files is refused at commit (its inputs'
    live segments changed); a later topic of the same name is a new topic (a new id).

    One transaction through `Database.commit` (read back: the topic id is gone). Crash
    before COMMIT: the topic is intact.
    """
    t, sg = s.topics.c, s.segments.c
    deleted: list[TopicInfo] = []

    def body(conn: sa.Connection) -> TopicInfo:
        deleted.clear()
        info = _locked_topic(conn, name)
        deleted.append(info)
        retire_segments(conn, lock_live_segments(conn, sg.topic_id == info.id),
                        db.clock.now_ms())
        for table in (s.producer_state, s.segments, s.partitions):
            conn.execute(table.delete().where(table.c.topic_id == info.id))
        conn.execute(s.group_offsets.delete().where(s.group_offsets.c.topic == info.name))
        conn.execute(s.topics.delete().where(t.id == info.id))
        notify.announce(db, conn)  # waiting fetches of the topic answer now
        return info

    def read_back(conn: sa.Connection) -> TopicInfo | None:
        if not deleted:
            return None
        gone = conn.execute(sa.select(t.id).where(t.id == deleted[0].id)).first() is None
        return deleted[0] if gone else None

    return db.commit(f"delete of topic {name!r}", body, read_back, kind="topics")


def add_partitions(db: Database, name: str, count: int, *,
                   validate_only: bool = False) -> TopicInfo:
    """Grow the topic to `count` partitions (new ones empty); returns the topic after.

    InvalidPartitionsError unless `count` exceeds the current count (Kafka's
    CreatePartitions only grows a topic). `validate_only`: check, change nothing. One
    transaction through `Database.commit` (read back: the count is `count`).
    """
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidPartitionsError(f"partition count must be an integer, got {count!r}")

    def body(conn: sa.Connection) -> TopicInfo:
        info = _locked_topic(conn, name)
        if count <= info.partitions:
            raise InvalidPartitionsError(
                f"topic {name!r} already has {info.partitions} partitions" if
                count == info.partitions else f"topic {name!r} has {info.partitions}"
                f" partitions, more than the requested {count}: partitions can only grow")
        if validate_only:
            return dataclasses.replace(info, partitions=count)
        conn.execute(s.partitions.insert(), [
            {"topic_id": info.id, "partition": p, "log_start_offset": 0, "next_offset": 0}
            for p in range(info.partitions, count)])
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
                        validate_only: bool = False) -> TopicInfo:
    """Apply incremental config `changes` (Kafka's IncrementalAlterConfigs: SET, DELETE,
    APPEND, SUBTRACT) to the topic's overrides; returns the topic after.

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
        stored = apply_changes(info.configs, changes)
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
