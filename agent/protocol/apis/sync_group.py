"""SyncGroup (key 14): the leader hands in the assignment, which is stored before any
member gets its share; followers wait for it (agent/groups/).
READ on the group is needed (else GROUP_AUTHORIZATION_FAILED, as KafkaApis answers)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.sync_group import v0, v1, v2, v3, v4, v5
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v0.SyncGroupRequest | v1.SyncGroupRequest | v2.SyncGroupRequest | v3.SyncGroupRequest
           | v4.SyncGroupRequest | v5.SyncGroupRequest)
"""kio's SyncGroupRequest of each version served (0-5)."""
Static = v3.SyncGroupRequest | v4.SyncGroupRequest | v5.SyncGroupRequest  # group_instance_id
Named = v5.SyncGroupRequest  # protocol_type and protocol_name (v5+)


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.READ, ResourceType.GROUP, request.group_id):
        return b("SyncGroupResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.group_authorization_failed, protocol_type=None,
                 protocol_name=None, assignment=b"")
    result = await ctx.groups.sync(
        request.group_id, int(request.generation_id), request.member_id,
        request.group_instance_id if isinstance(request, Static) else None,
        request.protocol_type if isinstance(request, Named) else None,
        request.protocol_name if isinstance(request, Named) else None,
        [(a.member_id, a.assignment) for a in request.assignments])
    return b("SyncGroupResponse", throttle_time=NO_THROTTLE, error_code=result.error,
             protocol_type=result.protocol_type, protocol_name=result.protocol_name,
             assignment=result.assignment)
