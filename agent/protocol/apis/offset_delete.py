"""OffsetDelete (key 47): deletes a group's committed offsets of some partitions; a
partition of a topic the group's members subscribe to is refused with
GROUP_SUBSCRIBED_TO_TOPIC, as in Kafka."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.offset_delete import v0
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = v0.OffsetDeleteRequest
"""kio's OffsetDeleteRequest of each version served (0-0)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    partitions = [(t.name, int(p.partition_index)) for t in request.topics
                  for p in t.partitions]
    error, each = await ctx.groups.delete_offsets(request.group_id, partitions)
    return b("OffsetDeleteResponse", error_code=error, throttle_time=NO_THROTTLE,
             topics=() if error is not ErrorCode.none else tuple(
                 b("OffsetDeleteResponseTopic", name=t.name, partitions=tuple(
                     b("OffsetDeleteResponsePartition", partition_index=i32(p.partition_index),
                       error_code=each[(t.name, int(p.partition_index))])
                     for p in t.partitions))
                 for t in request.topics))
