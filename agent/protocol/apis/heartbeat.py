"""Heartbeat (key 12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to
rejoin (agent/groups/).
READ on the group is needed (else GROUP_AUTHORIZATION_FAILED, as KafkaApis answers)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.heartbeat import v0, v1, v2, v3, v4
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v0.HeartbeatRequest | v1.HeartbeatRequest | v2.HeartbeatRequest | v3.HeartbeatRequest
           | v4.HeartbeatRequest)
"""kio's HeartbeatRequest of each version served (0-4)."""
Static = v3.HeartbeatRequest | v4.HeartbeatRequest  # group_instance_id (v3+)


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.READ, ResourceType.GROUP, request.group_id):
        return b("HeartbeatResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.group_authorization_failed)
    error = await ctx.groups.heartbeat(request.group_id, int(request.generation_id),
                                       request.member_id,
                                       request.group_instance_id
                                       if isinstance(request, Static) else None)
    return b("HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=error)
