"""Topics and their partitions: create, look up, list."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from . import schema as s
from .engine import Database
from .errors import InvalidPartitionsError, InvalidTopicError, TopicExistsError, UnknownTopicError
from .models import PartitionInfo, TopicInfo
from .topicconfig import TopicConfig, validate_configs

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
            topic_id = conn.execute(
                s.topics.insert().values(
                    name=name, partitions=partitions,
                    configs=json.dumps(stored, sort_keys=True), created_at_ms=now,
                ).returning(s.topics.c.id)
            ).scalar_one()
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
