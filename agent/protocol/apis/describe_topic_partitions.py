"""DescribeTopicPartitions (key 75, KIP-966): topics and their partitions as Metadata
describes them (leaders by `agent.placement.leader`, every live agent a replica and in
sync, leader epoch -1), paginated as Kafka's KRaftMetadataCache pages them: topics in name
order from the cursor's topic (its partitions from the cursor's index), at most
response_partition_limit partitions (at least 1, at most max.request.partition.size.limit,
Kafka's 2000), next_cursor naming where to go on (null once all is described). No topics
asks for every topic (unknown names then cannot occur); a named topic that does not exist
is UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION if its name is illegal. A
cursor whose topic is not among those named, or whose partition is negative, is
INVALID_REQUEST for every topic named (DescribeTopicPartitionsRequestHandler's checks).
Eligible leader replicas (KIP-966's ELR) are empty: every replica is in sync.
Topics the client may not DESCRIBE are left out of a listing of all, else answered
TOPIC_AUTHORIZATION_FAILED; each topic carries its authorized-operations bitfield.
"""

from __future__ import annotations

import uuid

from kio.schema.describe_topic_partitions import v0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from agent.placement import leader
from metadata import AgentInfo, TopicInfo
from metadata.errors import InvalidTopicError
from metadata.topics import validate_topic_name

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..session import SESSION

Request = v0.DescribeTopicPartitionsRequest
"""kio's DescribeTopicPartitionsRequest of the version served (0)."""

MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000  # Kafka's max.request.partition.size.limit default
NO_ID = uuid.UUID(int=0)  # Kafka's ZERO_UUID: the id of a topic not described


def _topics(ctx: ServerContext, request: Request) -> dict[str, TopicInfo | ErrorCode]:
    """The topics to describe from the cursor's on, by name (blocking: metadata reads)."""
    start = request.cursor.topic_name if request.cursor is not None else ""
    if not request.topics:
        return {t.name: t for t in ctx.metadata.list_topics() if t.name >= start}
    found: dict[str, TopicInfo | ErrorCode] = {}
    known = {t.name: t for t in ctx.metadata.list_topics()}
    for name in sorted({str(t.name) for t in request.topics if t.name >= start}):
        try:
            validate_topic_name(name)
            found[name] = known.get(name, ErrorCode.unknown_topic_or_partition)
        except InvalidTopicError:
            found[name] = ErrorCode.invalid_topic_exception
    return found


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    cursor = request.cursor
    named = {str(t.name) for t in request.topics}
    if cursor is not None and ((request.topics and cursor.topic_name not in named)
                               or cursor.partition_index < 0):
        return b("DescribeTopicPartitionsResponse", throttle_time=NO_THROTTLE, topics=tuple(
            b("DescribeTopicPartitionsResponseTopic", error_code=ErrorCode.invalid_request,
              name=t.name, topic_id=NO_ID, partitions=()) for t in request.topics),
            next_cursor=None)
    topics = await ctx.run(_topics, ctx, request)
    # Topics the client may not DESCRIBE: left out of a listing of all, else answered
    # TOPIC_AUTHORIZATION_FAILED after the page, their existence not disclosed (KafkaApis).
    visible = ctx.authz.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topics)
    denied = sorted(n for n in named if n not in visible)
    topics = {name: t for name, t in topics.items() if name in visible}
    brokers = await ctx.run(ctx.live_brokers, SESSION.get().listener)
    ids = tuple(i32(br.node_id) for br in brokers)
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, int(request.response_partition_limit)),
                    1)
    out: list[Entity] = []
    next_cursor = None
    for name, topic in sorted(topics.items()):
        if remaining == 0:  # the previous topics filled the page: go on at this one
            next_cursor = b("Cursor", topic_name=name, partition_index=i32(0))
            break
        operations = i32(ctx.authz.operations(ResourceType.TOPIC, name))
        if isinstance(topic, ErrorCode):
            out.append(b("DescribeTopicPartitionsResponseTopic", error_code=topic, name=name,
                         topic_id=NO_ID, partitions=(),
                         topic_authorized_operations=operations))
            continue
        first = int(cursor.partition_index) if cursor and cursor.topic_name == name else 0
        upper = min(topic.partitions, first + remaining)
        out.append(b("DescribeTopicPartitionsResponseTopic", error_code=ErrorCode.none,
                     name=name, topic_id=ctx.topic_id(topic), is_internal=False,
                     partitions=tuple(_partition(b, topic, p, brokers, ids)
                                      for p in range(first, upper)),
                     topic_authorized_operations=operations))
        if upper < topic.partitions:
            next_cursor = b("Cursor", topic_name=name, partition_index=i32(upper))
            break
        remaining -= max(upper - first, 0)
    out += [b("DescribeTopicPartitionsResponseTopic",
              error_code=ErrorCode.topic_authorization_failed, name=name, topic_id=NO_ID,
              partitions=()) for name in denied]
    return b("DescribeTopicPartitionsResponse", throttle_time=NO_THROTTLE, topics=tuple(out),
             next_cursor=next_cursor)


def _partition(b: Builder, topic: TopicInfo, p: int, brokers: list[AgentInfo],
               ids: tuple[i32, ...]) -> Entity:
    return b("DescribeTopicPartitionsResponsePartition", error_code=ErrorCode.none,
             partition_index=i32(p),
             leader_id=i32(leader(topic.name, p, brokers).node_id if brokers else -1),
             leader_epoch=i32(-1), replica_nodes=ids, isr_nodes=ids,
             eligible_leader_replicas=(), last_known_elr=(), offline_replicas=())
