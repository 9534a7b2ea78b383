"""AlterPartitionReassignments (key 45): nothing to move. Every live agent is every
partition's replica (the object store holds the data), so a reassignment has nothing to
copy: one that names live agents, checked as Kafka's validateManualPartitionAssignment
checks it (INVALID_REPLICA_ASSIGNMENT otherwise, Kafka's words: `create_topics.
assignment_problem`), completes at once with placement unchanged, as CreateTopics'
assignments do; a cancellation (replicas null) is NO_REASSIGNMENT_IN_PROGRESS, as Kafka
answers a partition not being reassigned; a partition of no topic, or past its count,
UNKNOWN_TOPIC_OR_PARTITION (ReplicationControlManager's order and words).
ALTER on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kio.schema.alter_partition_reassignments import v0
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from .create_topics import assignment_problem
from .elect_leaders import partition_counts

Request = v0.AlterPartitionReassignmentsRequest
"""kio's AlterPartitionReassignmentsRequest of the version served (0)."""

CLUSTER_DENIED = "Cluster authorization failed."  # Kafka's Errors message
NOT_REASSIGNING = "No partition reassignment is in progress."  # Kafka's Errors message


def _answer(counts: dict[str, int], live: set[int], topic: str, partition: int,
            replicas: tuple[int, ...] | None) -> tuple[ErrorCode, str | None]:
    if topic not in counts:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
    if not 0 <= partition < counts[topic]:
        return (ErrorCode.unknown_topic_or_partition,
                f"Unable to find partition {topic}:{partition}.")
    if replicas is None:
        return ErrorCode.no_reassignment_in_progress, NOT_REASSIGNING
    problem = assignment_problem(replicas, live, None)
    if problem is not None:
        return ErrorCode.invalid_replica_assignment, problem
    return ErrorCode.none, None


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return b("AlterPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.cluster_authorization_failed,
                 error_message=CLUSTER_DENIED, responses=())
    counts = await ctx.run(partition_counts, ctx)
    live = {a.node_id for a in await ctx.run(ctx.live_brokers)}

    def partition(topic: str, p: v0.request.ReassignablePartition) -> Entity:
        replicas = None if p.replicas is None else tuple(int(r) for r in p.replicas)
        code, message = _answer(counts, live, topic, int(p.partition_index), replicas)
        return b("ReassignablePartitionResponse", partition_index=p.partition_index,
                 error_code=code, error_message=message)

    return b("AlterPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
             error_code=ErrorCode.none, error_message=None, responses=tuple(
                 b("ReassignableTopicResponse", name=t.name, partitions=tuple(
                     partition(t.name, p) for p in t.partitions))
                 for t in request.topics))


