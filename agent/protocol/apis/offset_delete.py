"""OffsetDelete (key 47): deletes a group's committed offsets of some partitions; a
partition of a topic the group's members subscribe to is refused with
GROUP_SUBSCRIBED_TO_TOPIC, as in Kafka. DELETE on the group is needed (else
GROUP_AUTHORIZATION_FAILED), and READ on each topic (else its partitions
TOPIC_AUTHORIZATION_FAILED, untouched)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.offset_delete import v0
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = v0.OffsetDeleteRequest
"""kio's OffsetDeleteRequest of each version served (0-0)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    authz = ctx.authz
    if not authz.allows(Operation.DELETE, ResourceType.GROUP, request.group_id):
        return b("OffsetDeleteResponse", error_code=ErrorCode.group_authorization_failed,
                 throttle_time=NO_THROTTLE, topics=())
    readable = authz.allowed(Operation.READ, ResourceType.TOPIC,
                             (t.name for t in request.topics))
    partitions = [(t.name, int(p.partition_index)) for t in request.topics
                  if t.name in readable for p in t.partitions]
    error, each = await ctx.groups.delete_offsets(request.group_id, partitions)
    each = {**dict.fromkeys(((t.name, int(p.partition_index)) for t in request.topics
                             if t.name not in readable for p in t.partitions),
                            ErrorCode.topic_authorization_failed), **each}
    return b("OffsetDeleteResponse", error_code=error, throttle_time=NO_THROTTLE,
             topics=() if error is not ErrorCode.none else tuple(
                 b("OffsetDeleteResponseTopic", name=t.name, partitions=tuple(
                     b("OffsetDeleteResponsePartition", partition_index=i32(p.partition_index),
                       error_code=each[(t.name, int(p.partition_index))])
                     for p in t.partitions))
                 for t in request.topics))
