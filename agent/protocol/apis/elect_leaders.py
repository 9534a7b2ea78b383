"""ElectLeaders (key 43): nothing to elect. Every partition's leader is placement's choice
among the live agents (`agent.placement.leader`), never down while an agent is live, and
any agent serves any partition; so, as Kafka's ReplicationControlManager answers a
partition that has its preferred leader (or, unclean, any leader), each named partition is
ELECTION_NOT_NEEDED; one of no topic or past its count UNKNOWN_TOPIC_OR_PARTITION; with
topic_partitions null (every partition) each topic is listed without partitions, as Kafka
leaves out those whose election was not needed. An election type other than preferred (0)
or unclean (1) is INVALID_REQUEST for the whole request (Kafka: "Unknown election type").
ALTER on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED, on every partition too).
"""

from __future__ import annotations

from kio.schema.elect_leaders import v0, v1, v2
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = v0.ElectLeadersRequest | v1.ElectLeadersRequest | v2.ElectLeadersRequest
"""kio's ElectLeadersRequest of each version served (0-2)."""
Typed = v1.ElectLeadersRequest | v2.ElectLeadersRequest  # election_type (v1+; v0: preferred)

PREFERRED, UNCLEAN = 0, 1


def partition_counts(ctx: ServerContext) -> dict[str, int]:
    """Every topic's partition count (blocking: one metadata read)."""
    return {t.name: t.partitions for t in ctx.metadata.list_topics()}


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        # KafkaApis: the error at the top and on every partition named.
        denied = ErrorCode.cluster_authorization_failed
        return b("ElectLeadersResponse", throttle_time=NO_THROTTLE, error_code=denied,
                 replica_election_results=tuple(
                     b("ReplicaElectionResult", topic=t.topic, partition_result=tuple(
                         b("PartitionResult", partition_id=i32(p), error_code=denied,
                           error_message=None) for p in t.partitions))
                     for t in request.topic_partitions or ()))
    kind = int(request.election_type) if isinstance(request, Typed) else PREFERRED
    counts = await ctx.run(partition_counts, ctx)
    error = ErrorCode.none
    if kind not in (PREFERRED, UNCLEAN):
        error = ErrorCode.invalid_request

    def result(topic: str, partition: int) -> Entity:
        if error is not ErrorCode.none:
            code, message = error, f"Unknown election type {kind}"
        elif 0 <= partition < counts.get(topic, 0):
            code, message = ErrorCode.election_not_needed, None
        else:
            code, message = (ErrorCode.unknown_topic_or_partition,
                             f"No such partition as {topic}-{partition}" if topic in counts
                             else f"No such topic as {topic}")
        return b("PartitionResult", partition_id=i32(partition), error_code=code,
                 error_message=message)

    if request.topic_partitions is None:
        results = tuple(b("ReplicaElectionResult", topic=name, partition_result=())
                        for name in sorted(counts)) if error is ErrorCode.none else ()
    else:
        results = tuple(b("ReplicaElectionResult", topic=t.topic, partition_result=tuple(
            result(t.topic, int(p)) for p in t.partitions)) for t in request.topic_partitions)
    return b("ElectLeadersResponse", throttle_time=NO_THROTTLE, error_code=error,
             replica_election_results=results)
