"""CreateTopics (key 19): topics created in the metadata store (`MetadataStore.create_topic`,
which also checks a validate_only request, so the two cannot drift: name as Kafka's
Topic.validate, '.'/'_' collisions, partition count, configs as `silt topics create`,
existence, room under max.partitions).

Refused as Kafka's controller refuses (ReplicationControlManager.createTopics): a request
adding more than max.partitions.per.request partitions in all gets POLICY_VIOLATION for
every topic before anything is looked at (validateTotalNumberOfPartitions, KAFKA-17870); a
name given twice INVALID_REQUEST; a replication factor of 0 or below -1
INVALID_REPLICATION_FACTOR; a partition count of 0 or below -1 INVALID_PARTITIONS; an
illegal name INVALID_TOPIC_EXCEPTION; no room under max.partitions POLICY_VIOLATION.
Authorization first (KafkaApis, before the controller): CREATE on the cluster or on the
topic, else TOPIC_AUTHORIZATION_FAILED; without DESCRIBE_CONFIGS on it a created topic's
topic_config_error_code is TOPIC_AUTHORIZATION_FAILED (v5+).

num_partitions -1 means the agent's num.partitions (Kafka's default, 1); replication factor
and replica assignments are not stored (the object store holds the durability, any agent
serves any partition): a replication factor is accepted as given, and explicit assignments
are accepted when Kafka's controller would accept them against the live agents, then their
placement is ignored (the topic gets one partition per assignment). Checked as
ReplicationControlManager.createTopic does, in its order: with assignments, a replication
factor or a partition count other than -1 is INVALID_REQUEST; a partition index given twice,
an empty replica list, an agent not live, an agent named twice in one list, a list whose
length differs from the first's, or indexes that are not 0..n-1 are
INVALID_REPLICA_ASSIGNMENT (validateManualPartitionAssignment's words).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence

from kio.schema.create_topics import v2, v3, v4, v5, v6, v7
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from metadata import MetadataStore, TopicInfo

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed

Request = (v2.CreateTopicsRequest | v3.CreateTopicsRequest | v4.CreateTopicsRequest
           | v5.CreateTopicsRequest | v6.CreateTopicsRequest | v7.CreateTopicsRequest)
"""kio's CreateTopicsRequest of each version served (2-7)."""
Topic = (v2.request.CreatableTopic | v3.request.CreatableTopic | v4.request.CreatableTopic
         | v5.request.CreatableTopic | v6.request.CreatableTopic | v7.request.CreatableTopic)


Outcome = tuple[ErrorCode, str | None, TopicInfo | None]
TOO_MANY = "Excessively large number of partitions per request."  # Kafka's words


def assignment_problem(broker_ids: Sequence[int], live: Collection[int],
                       replicas: int | None) -> str | None:
    """Why Kafka's validateManualPartitionAssignment refuses one partition's replica list
    (INVALID_REPLICA_ASSIGNMENT), or None: brokers looked at in ascending order, `replicas`
    the count of the lists before it (None: the first)."""
    if not broker_ids:
        return "The manual partition assignment includes an empty replica list."
    previous: int | None = None
    for broker in sorted(broker_ids):
        if broker not in live:
            return (f"The manual partition assignment includes broker {broker}, but no such"
                    " broker is registered.")
        if broker == previous:
            return (f"The manual partition assignment includes the broker {broker} more than"
                    " once.")
        previous = broker
    if replicas is not None and len(broker_ids) != replicas:
        return (f"The manual partition assignment includes a partition with {len(broker_ids)}"
                " replica(s), but this is not consistent with previous partitions, which have"
                f" {replicas} replica(s).")
    return None


def assignments_problem(topic: Topic, live: Collection[int]) -> tuple[ErrorCode, str] | None:
    """Why Kafka's createTopic refuses a topic's explicit assignments, or None."""
    if topic.replication_factor != -1:
        return (ErrorCode.invalid_request, "A manual partition assignment was specified, but"
                " replication factor was not set to -1.")
    if topic.num_partitions != -1:
        return (ErrorCode.invalid_request, "A manual partition assignment was specified, but"
                " numPartitions was not set to -1.")
    seen: set[int] = set()
    replicas: int | None = None
    for a in topic.assignments:
        if a.partition_index in seen:
            return (ErrorCode.invalid_replica_assignment, "Found multiple manual partition"
                    f" assignments for partition {a.partition_index}")
        seen.add(int(a.partition_index))
        problem = assignment_problem([int(b) for b in a.broker_ids], live, replicas)
        if problem is not None:
            return ErrorCode.invalid_replica_assignment, problem
        replicas = len(a.broker_ids)
    if seen != set(range(len(seen))):
        return (ErrorCode.invalid_replica_assignment,
                "partitions should be a consecutive 0-based integer sequence")
    return None


def create(md: MetadataStore, topic: Topic, validate_only: bool, default_partitions: int,
           live: Collection[int] = ()) -> Outcome:
    """Create (or only validate) one topic (blocking: runs in the pool); `live`: the live
    agents' ids, which explicit assignments must name."""
    if topic.assignments:
        refused = assignments_problem(topic, live)
        if refused is not None:
            return *refused, None
    elif topic.replication_factor < -1 or topic.replication_factor == 0:
        return (ErrorCode.invalid_replication_factor, "Replication factor must be larger"
                " than 0, or -1 to use the default value.", None)
    elif topic.num_partitions < -1 or topic.num_partitions == 0:
        return (ErrorCode.invalid_partitions, "Number of partitions was set to an invalid"
                " non-positive value.", None)
    if any(c.value is None for c in topic.configs):
        return ErrorCode.invalid_config, "config values must not be null", None
    configs = {c.name: c.value for c in topic.configs if c.value is not None}
    partitions = len(topic.assignments) if topic.assignments else \
        default_partitions if topic.num_partitions == -1 else int(topic.num_partitions)
    try:
        info = md.create_topic(topic.name, partitions, configs, validate_only=validate_only)
    except Exception as exc:
        return *failed(f"creating topic {topic.name!r}", exc), None
    return ErrorCode.none, None, None if validate_only else info


def requested_partitions(topics: Sequence[Topic], default_partitions: int) -> int:
    """The partitions a CreateTopics request asks for in all, as Kafka counts them (-1:
    the default; invalid counts: none)."""
    total = 0
    for t in topics:
        if t.assignments:
            total += len(t.assignments)
        elif t.num_partitions == -1:
            total += default_partitions
        elif t.num_partitions > 0:
            total += int(t.num_partitions)
    return total


def create_all(ctx: ServerContext, request: Request, creatable: Callable[[str], bool]
               ) -> list[tuple[Topic, Outcome]]:
    """Create each topic (blocking: runs in the pool). A duplicate is INVALID_REQUEST, then
    one not `creatable` (CREATE on neither the cluster nor it) TOPIC_AUTHORIZATION_FAILED,
    as KafkaApis checks before the controller sees the others."""
    default = ctx.config.num_partitions
    counts = Counter(t.name for t in request.topics)
    refused: dict[str, Outcome] = {}
    for t in request.topics:
        if counts[t.name] > 1:
            refused[t.name] = (ErrorCode.invalid_request, "Duplicate topic name.", None)
        elif not creatable(t.name):
            refused[t.name] = (ErrorCode.topic_authorization_failed, "Authorization failed.",
                               None)
    wanted = [t for t in request.topics if t.name not in refused]
    if requested_partitions(wanted, default) > ctx.config.max_partitions_per_request:
        return [(t, refused.get(t.name, (ErrorCode.policy_violation, TOO_MANY, None)))
                for t in request.topics]
    validate_only = request.validate_only  # every version served (2+) has it
    live = {a.node_id for a in ctx.live_brokers()} if any(t.assignments for t in
                                                           wanted) else set()
    return [(t, refused[t.name] if t.name in refused
             else create(ctx.metadata, t, validate_only, default, live))
            for t in request.topics]


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    authz = ctx.authz
    creatable = (_anything if authz.allows(Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
                 else authz.decider(Operation.CREATE, ResourceType.TOPIC))
    results = await ctx.run(create_all, ctx, request, creatable)
    # Without DESCRIBE_CONFIGS on a topic its configs are not shown (v5+: the config error).
    described = authz.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC,
                              (t.name for t in request.topics))
    replicas = len(await ctx.run(ctx.live_brokers))
    return b("CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b("CreatableTopicResult", name=t.name, error_code=error, error_message=message,
          topic_id=None if info is None else ctx.topic_id(info),
          num_partitions=i32(-1 if info is None else info.partitions),
          replication_factor=i16(-1 if info is None else replicas),
          configs=None if info is None else (),
          topic_config_error_code=i16(0 if t.name in described
                                      else ErrorCode.topic_authorization_failed.value))
        for t, (error, message, info) in results))


def _anything(name: str) -> bool:
    return True
