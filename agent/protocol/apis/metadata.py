"""Metadata (key 3): the live agents as brokers, topics with partitions and leaders.

Brokers are the agent registry's live agents (`ServerContext.live_brokers`); each partition's
leader is `agent.placement.leader` of them, so every agent names the same leaders. Any agent
serves any partition, so a client sending to another agent is served all the same.

Leader epoch is -1 everywhere (clients then never need OffsetForLeaderEpoch); every broker
is a replica and in sync (any agent serves any partition). Topic ids are stable UUIDs derived
from the cluster secret (`ServerContext.topic_id`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from agent.placement import leader
from metadata import AgentInfo, MetadataStore, TopicInfo
from metadata.errors import MetadataError, UnknownTopicError

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext


def _topics(md: MetadataStore, names: list[str] | None) -> list[TopicInfo | str]:
    """The topics asked for (all if None); an unknown one stays a name."""
    if names is None:
        return list(md.list_topics())
    found: list[TopicInfo | str] = []
    for name in names:
        try:
            found.append(md.get_topic(name))
        except (UnknownTopicError, MetadataError):
            found.append(name)
    return found


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    names = None if request.topics is None else [t.name for t in request.topics
                                                   if t.name is not None]
    topics = await ctx.run(_topics, ctx.metadata, names)
    brokers = await ctx.run(ctx.live_brokers)
    ids = tuple(i32(br.node_id) for br in brokers)
    return b(
        "MetadataResponse", throttle_time=NO_THROTTLE, cluster_id=ctx.cluster_id(),
        controller_id=i32(brokers[0].node_id if brokers else -1),
        brokers=tuple(b("MetadataResponseBroker", node_id=i32(br.node_id), host=br.host,
                        port=i32(br.port), rack=None) for br in brokers),
        topics=tuple(_topic(ctx, b, t, brokers, ids) for t in topics),
    )


def _topic(ctx: ServerContext, b: Builder, topic: TopicInfo | str, brokers: list[AgentInfo],
           ids: tuple[i32, ...]) -> Any:
    if isinstance(topic, str):
        return b("MetadataResponseTopic", error_code=ErrorCode.unknown_topic_or_partition,
                 name=topic, topic_id=None, partitions=())
    # Before this agent registered (just after binding) there is no broker: clients retry.
    error = ErrorCode.none if brokers else ErrorCode.leader_not_available
    partitions = tuple(
        b("MetadataResponsePartition", error_code=error, partition_index=i32(p),
          leader_id=i32(leader(topic.name, p, brokers).node_id if brokers else -1),
          leader_epoch=i32(-1), replica_nodes=ids, isr_nodes=ids, offline_replicas=())
        for p in range(topic.partitions))
    return b("MetadataResponseTopic", error_code=ErrorCode.none, name=topic.name,
             topic_id=ctx.topic_id(topic), is_internal=False, partitions=partitions)
