"""OffsetDelete (key 47): deletes a group's committed offsets of some partitions; a
partition of a topic the group's members subscribe to is refused with
GROUP_SUBSCRIBED_TO_TOPIC, as in Kafka."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
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
