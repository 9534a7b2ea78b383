"""CreateTopics (key 19): topics created in the metadata store, configs validated as
`silt topics create` validates them (one place: `MetadataStore.create_topic`).

num_partitions -1 means the agent's num.partitions (Kafka's default, 1); replication factor
and replica assignments are not stored (the object store holds the durability, any agent
serves any partition): a replication factor is accepted as given, explicit assignments are
refused. validate_only checks the configs and that the topic does not exist yet, and creates
nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from metadata import MetadataStore, TopicInfo
from metadata.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from metadata.topicconfig import validate_configs

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Outcome = tuple[ErrorCode, str | None, TopicInfo | None]


def create(md: MetadataStore, topic: Any, validate_only: bool, default_partitions: int
           ) -> Outcome:
    """Create (or only validate) one topic (blocking: runs in the pool)."""
    if topic.assignments:
        return (ErrorCode.invalid_request, "replica assignments are not supported: any agent"
                " serves any partition", None)
    configs = {c.name: c.value for c in topic.configs}
    if any(v is None for v in configs.values()):
        return ErrorCode.invalid_config, "config values must not be null", None
    partitions = default_partitions if topic.num_partitions == -1 else int(topic.num_partitions)
    try:
        if validate_only:
            validate_configs(configs)
            try:
                md.get_topic(topic.name)
            except UnknownTopicError:
                return ErrorCode.none, None, None
            raise TopicExistsError(f"topic {topic.name!r} already exists")
        return ErrorCode.none, None, md.create_topic(topic.name, partitions, configs)
    except TopicExistsError as exc:
        return ErrorCode.topic_already_exists, str(exc), None
    except InvalidConfigError as exc:
        return ErrorCode.invalid_config, str(exc), None
    except InvalidPartitionsError as exc:
        return ErrorCode.invalid_partitions, str(exc), None
    except InvalidTopicError as exc:
        return ErrorCode.invalid_topic_exception, str(exc), None


def create_all(ctx: ServerContext, request: Any) -> list[tuple[Any, Outcome]]:
    return [(t, create(ctx.metadata, t, bool(getattr(request, "validate_only", False)),
                       ctx.config.num_partitions))
            for t in request.topics]


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    results = await ctx.run(create_all, ctx, request)
    replicas = len(await ctx.run(ctx.live_brokers))
    return b("CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b("CreatableTopicResult", name=t.name, error_code=error, error_message=message,
          topic_id=None if info is None else ctx.topic_id(info),
          num_partitions=i32(-1 if info is None else info.partitions),
          replication_factor=i16(-1 if info is None else replicas),
          configs=None if info is None else ())
        for t, (error, message, info) in results))
