"""Metadata (key 3): the live agents as brokers, topics with partitions and leaders.

Brokers are the agent registry's live agents having the listener the request came in on, at
their endpoint there (`ServerContext.live_brokers(listener)`, as Kafka lists a listener's
brokers); each partition's leader is `agent.placement.leader` of them, so every agent names
the same leaders to the clients of one listener. Any agent
serves any partition, so a client sending to another agent is served all the same.

Leader epoch is -1 everywhere (clients then never need OffsetForLeaderEpoch); every broker
is a replica and in sync (any agent serves any partition). Topic ids are stable UUIDs derived
from the cluster secret (`ServerContext.topic_id`).

Unknown topics get UNKNOWN_TOPIC_OR_PARTITION unless the agent's auto.create.topics.enable
is true and the request allows auto-creation (always before v4): then, as KafkaApis does,
they are created (num.partitions partitions, default configs) and answered
LEADER_NOT_AVAILABLE without partitions, so clients ask again and find them (or
POLICY_VIOLATION past max.partitions). A name Kafka's Topic.validate refuses gets
INVALID_TOPIC_EXCEPTION, auto-creation or not (KafkaApis.getTopicMetadata), before any
lookup.

Authorization (KafkaApis.handleTopicMetadataRequest): topics the client may not DESCRIBE
are left out of a listing of all topics, and answered TOPIC_AUTHORIZATION_FAILED when
named, without a topic id and without being looked up; an unknown topic is auto-created
only with CREATE on the cluster or on it (else TOPIC_AUTHORIZATION_FAILED). Asked for
(v8+), each topic's authorized operations and (v8-v10) the cluster's are the bitfields
Kafka computes (0 for the cluster without DESCRIBE on it; without an authorizer every
operation of the type).

When the metadata store fails (the database unreachable), a topic asked for by name gets
LEADER_NOT_AVAILABLE (retriable: the client asks again; never "unknown", which would be
untrue), and the broker list is empty if the registry cannot be read. A request for every
topic has no honest answer then (an empty list would tell clients each topic is gone): its
connection is closed, as for any handler failure, and the client reconnects and retries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.metadata import v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from agent.placement import leader
from metadata import AgentInfo, MetadataStore, TopicInfo
from metadata.errors import TopicExistsError, UnknownTopicError
from metadata.topics import validate_topic_name

from ..authz import NOT_COMPUTED
from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import LOOKUP, failed, log_failure
from ..session import SESSION

Request = (v1.MetadataRequest | v2.MetadataRequest | v3.MetadataRequest | v4.MetadataRequest
           | v5.MetadataRequest | v6.MetadataRequest | v7.MetadataRequest | v8.MetadataRequest
           | v9.MetadataRequest | v10.MetadataRequest | v11.MetadataRequest | v12.MetadataRequest
           | v13.MetadataRequest)
"""kio's MetadataRequest of each version served (1-13)."""
# Versions without include_topic_authorized_operations (before v8), and those with
# include_cluster_authorized_operations (v8-v10: DescribeCluster serves it from v11).
OLD = (v1.MetadataRequest | v2.MetadataRequest | v3.MetadataRequest | v4.MetadataRequest
       | v5.MetadataRequest | v6.MetadataRequest | v7.MetadataRequest)
CLUSTER_OPS = v8.MetadataRequest | v9.MetadataRequest | v10.MetadataRequest


def _anything(name: str) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Missing:
    """A topic asked for that was not there: its name and the error it is answered with."""

    name: str
    error: ErrorCode


def _topics(md: MetadataStore, names: list[str] | None, create_partitions: int | None,
            described: Callable[[str], bool], creatable: Callable[[str], bool]
            ) -> list[TopicInfo | Missing]:
    """The topics asked for (all if None), those not `described` left out of a listing of
    all and answered TOPIC_AUTHORIZATION_FAILED when named (unlooked-up: their existence is
    not disclosed); unknown ones are created with `create_partitions` partitions unless that
    is None, if `creatable` (else TOPIC_AUTHORIZATION_FAILED)."""
    if names is None:
        return [t for t in md.list_topics() if described(t.name)]
    found: list[TopicInfo | Missing] = []
    for name in names:
        if not described(name):
            found.append(Missing(name, ErrorCode.topic_authorization_failed))
            continue
        try:
            try:
                found.append(md.get_topic(validate_topic_name(name)))
            except UnknownTopicError:
                found.append(_missing(md, name, create_partitions, creatable))
        except Exception as exc:  # an invalid name, no room under max.partitions (created),
            # a store failure (LOOKUP: the topic may well exist)
            found.append(Missing(name, failed(f"looking up topic {name!r}", exc, LOOKUP)[0]))
    return found


def _missing(md: MetadataStore, name: str, create_partitions: int | None,
             creatable: Callable[[str], bool]) -> Missing:
    if create_partitions is None:
        return Missing(name, ErrorCode.unknown_topic_or_partition)
    if not creatable(name):  # CREATE on neither the cluster nor the topic
        return Missing(name, ErrorCode.topic_authorization_failed)
    with contextlib.suppress(TopicExistsError):  # created meanwhile by another client
        md.create_topic(name, create_partitions)  # InvalidTopicError: a '.'/'_' collision
    return Missing(name, ErrorCode.leader_not_available)


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    names = None if request.topics is None else [t.name for t in request.topics
                                                   if t.name is not None]
    auto = ctx.config.auto_create_topics_enable and (  # a client may refuse it from v4
        isinstance(request, v1.MetadataRequest | v2.MetadataRequest | v3.MetadataRequest)
        or request.allow_auto_topic_creation)
    authz = ctx.authz
    creatable = (authz.decider(Operation.CREATE, ResourceType.TOPIC)
                 if auto and not authz.allows(Operation.CREATE, ResourceType.CLUSTER,
                                              CLUSTER_NAME) else _anything)
    topics = await ctx.run(_topics, ctx.metadata, names,
                           ctx.config.num_partitions if auto else None,
                           authz.decider(Operation.DESCRIBE, ResourceType.TOPIC), creatable)
    ops = not isinstance(request, OLD) and request.include_topic_authorized_operations
    cluster_ops = authz.cluster_operations(
        isinstance(request, CLUSTER_OPS) and request.include_cluster_authorized_operations)
    try:
        brokers = await ctx.run(ctx.live_brokers, SESSION.get().listener)
    except Exception as exc:
        log_failure("listing the live agents", exc)
        brokers = []
    ids = tuple(i32(br.node_id) for br in brokers)
    return b(
        "MetadataResponse", throttle_time=NO_THROTTLE, cluster_id=ctx.cluster_id(),
        controller_id=i32(brokers[0].node_id if brokers else -1),
        brokers=tuple(b("MetadataResponseBroker", node_id=i32(br.node_id), host=br.host,
                        port=i32(br.port), rack=None) for br in brokers),
        topics=tuple(_topic(ctx, b, t, brokers, ids, ops) for t in topics),
        cluster_authorized_operations=i32(cluster_ops),
        error_code=ErrorCode.none,  # v13+ (KIP-1102): a top-level error, none here
    )


def _topic(ctx: ServerContext, b: Builder, topic: TopicInfo | Missing,
           brokers: list[AgentInfo], ids: tuple[i32, ...], ops: bool) -> Entity:
    # Kafka computes the bitfield for every topic entry when asked (errors included).
    operations = i32(ctx.authz.operations(ResourceType.TOPIC, topic.name) if ops
                     else NOT_COMPUTED)
    if isinstance(topic, Missing):
        return b("MetadataResponseTopic", error_code=topic.error, name=topic.name,
                 topic_id=None, is_internal=False, partitions=(),
                 topic_authorized_operations=operations)
    # Before this agent registered (just after binding) there is no broker: clients retry.
    error = ErrorCode.none if brokers else ErrorCode.leader_not_available
    partitions = tuple(
        b("MetadataResponsePartition", error_code=error, partition_index=i32(p),
          leader_id=i32(leader(topic.name, p, brokers).node_id if brokers else -1),
          leader_epoch=i32(-1), replica_nodes=ids, isr_nodes=ids, offline_replicas=())
        for p in range(topic.partitions))
    return b("MetadataResponseTopic", error_code=ErrorCode.none, name=topic.name,
             topic_id=ctx.topic_id(topic), is_internal=False, partitions=partitions,
             topic_authorized_operations=operations)
