"""ListPartitionReassignments (key 46): none is ever in progress (a reassignment has
nothing to move here and completes at once: alter_partition_reassignments.py), so the
answer lists no topic, for every topic or the ones named, as Kafka's
ReplicationControlManager lists only reassigning partitions.
DESCRIBE on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments import v0
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from .alter_partition_reassignments import CLUSTER_DENIED

Request = v0.ListPartitionReassignmentsRequest
"""kio's ListPartitionReassignmentsRequest of the version served (0)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return b("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.cluster_authorization_failed,
                 error_message=CLUSTER_DENIED, topics=())
    return b("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
             error_code=ErrorCode.none, error_message=None, topics=())
