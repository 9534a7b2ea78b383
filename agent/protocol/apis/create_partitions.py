"""CreatePartitions (key 37): grow a topic's partition count (`MetadataStore.add_partitions`;
only growing: INVALID_PARTITIONS otherwise). validate_only checks and changes nothing.
Explicit assignments are accepted, and their placement ignored (any agent serves any
partition), when Kafka's controller (ReplicationControlManager.createPartitions) would accept
them against the live agents: for a topic that grows, as many assignments as partitions added
(else INVALID_REPLICA_ASSIGNMENT "Attempted to add ..."), each list checked as CreateTopics
checks one (`create_topics.assignment_problem`). The lists must agree in length with each
other; Kafka also holds them to the topic's replication factor, which silt does not store.
A topic named twice gets INVALID_REQUEST. A change the metadata
store did not make is that topic's REQUEST_TIMED_OUT (not applied: retry) or
UNKNOWN_SERVER_ERROR (`errors.ADMIN`). ALTER on the topic is needed (else
TOPIC_AUTHORIZATION_FAILED).

Limits as for CreateTopics: a request adding more than max.partitions.per.request
partitions in all gets POLICY_VIOLATION for every topic (Kafka's controller bounds the
records of one request the same way), a topic growing past max.partitions POLICY_VIOLATION.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Sequence

from kio.schema.create_partitions import v0, v1, v2, v3
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from metadata.errors import UnknownTopicError

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed
from .create_topics import TOO_MANY, assignment_problem

Request = (v0.CreatePartitionsRequest | v1.CreatePartitionsRequest | v2.CreatePartitionsRequest
           | v3.CreatePartitionsRequest)
"""kio's CreatePartitionsRequest of each version served (0-3)."""
Topic = (v0.request.CreatePartitionsTopic | v1.request.CreatePartitionsTopic
         | v2.request.CreatePartitionsTopic | v3.request.CreatePartitionsTopic)


Outcome = tuple[str, ErrorCode, str | None]
DENIED = "The topic authorization is failed."  # KafkaApis' words


def grow_all(ctx: ServerContext, request: Request, alterable: Callable[[str], bool]
             ) -> list[Outcome]:
    """Grow each topic (blocking: runs in the pool); one not `alterable` (no ALTER on it)
    answers TOPIC_AUTHORIZATION_FAILED, after the duplicates' INVALID_REQUEST (KafkaApis)."""
    counts = Counter(t.name for t in request.topics)
    allowed = [t for t in request.topics if counts[t.name] == 1 and alterable(t.name)]
    if _added(ctx, allowed) > ctx.config.max_partitions_per_request:
        return [(t.name, ErrorCode.policy_violation, TOO_MANY) if t in allowed
                else (t.name, ErrorCode.topic_authorization_failed, DENIED)
                if counts[t.name] == 1
                else (t.name, ErrorCode.invalid_request, "Duplicate topic in request.")
                for t in request.topics]
    out: list[Outcome] = []
    for t in request.topics:
        if counts[t.name] > 1:
            out.append((t.name, ErrorCode.invalid_request,
                        f"topic {t.name!r} is named more than once"))
        elif not alterable(t.name):
            out.append((t.name, ErrorCode.topic_authorization_failed, DENIED))
        elif t.assignments and (problem := _assignments_problem(ctx, t)) is not None:
            out.append((t.name, ErrorCode.invalid_replica_assignment, problem))
        else:
            try:
                ctx.metadata.add_partitions(t.name, int(t.count),
                                            validate_only=bool(request.validate_only))
            except Exception as exc:
                out.append((t.name, *failed(f"growing topic {t.name!r}", exc)))
            else:
                ctx.agent.forget_topics()
                out.append((t.name, ErrorCode.none, None))
    return out


def _assignments_problem(ctx: ServerContext, topic: Topic) -> str | None:
    """Why Kafka refuses a growing topic's explicit assignments, or None (also when the topic
    is unknown or does not grow: `add_partitions` answers those first, as Kafka does)."""
    try:
        current = ctx.metadata.get_topic(topic.name).partitions
    except UnknownTopicError:
        return None
    assignments = topic.assignments or ()
    additional = int(topic.count) - current
    if additional <= 0:
        return None
    if len(assignments) != additional:
        return (f"Attempted to add {additional} additional partition(s), but only"
                f" {len(assignments)} assignment(s) were specified.")
    live = {a.node_id for a in ctx.live_brokers()}
    replicas: int | None = None
    for a in assignments:
        problem = assignment_problem([int(b) for b in a.broker_ids], live, replicas)
        if problem is not None:
            return problem
        replicas = len(a.broker_ids)
    return None


def _added(ctx: ServerContext, topics: Sequence[Topic]) -> int:
    """The partitions the request would add in all (topics it cannot grow: none)."""
    added = 0
    for t in topics:
        with contextlib.suppress(UnknownTopicError):
            added += max(0, int(t.count) - ctx.metadata.get_topic(t.name).partitions)
    return added


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    results = await ctx.run(grow_all, ctx, request,
                            ctx.authz.decider(Operation.ALTER, ResourceType.TOPIC))
    return b("CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(
        b("CreatePartitionsTopicResult", name=name, error_code=error, error_message=message)
        for name, error, message in results))
