"""ListPartitionReassignments (key 46): none is ever in progress (a reassignment has
nothing to move here and completes at once: alter_partition_reassignments.py), so the
answer lists no topic, for every topic or the ones named, as Kafka's
ReplicationControlManager lists only reassigning partitions."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments import v0
from kio.static.protocol import Entity, RequestHeader

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = v0.ListPartitionReassignmentsRequest
"""kio's ListPartitionReassignmentsRequest of the version served (0)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    return b("ListPartitionReassignmentsResponse", throttle_time=NO_THROTTLE,
             error_code=ErrorCode.none, error_message=None, topics=())
