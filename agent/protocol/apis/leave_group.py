"""LeaveGroup (key 13): members leave at once (no session timeout to wait for) and the
group rebalances; one member before v3, a batch with per-member errors from v3 (a static
member may leave by its instance id alone).
READ on the group is needed (else GROUP_AUTHORIZATION_FAILED, as KafkaApis answers)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.leave_group import v0, v1, v2, v3, v4, v5
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v0.LeaveGroupRequest | v1.LeaveGroupRequest | v2.LeaveGroupRequest
           | v3.LeaveGroupRequest | v4.LeaveGroupRequest | v5.LeaveGroupRequest)
"""kio's LeaveGroupRequest of each version served (0-5)."""
Batched = v3.LeaveGroupRequest | v4.LeaveGroupRequest | v5.LeaveGroupRequest  # members (v3+)


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.READ, ResourceType.GROUP, request.group_id):
        return b("LeaveGroupResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.group_authorization_failed, members=())
    batched = isinstance(request, Batched)
    members = [(m.member_id, m.group_instance_id) for m in request.members] \
        if isinstance(request, Batched) else [(request.member_id, None)]
    error, each = await ctx.groups.leave(request.group_id, members)
    if not batched:
        return b("LeaveGroupResponse", throttle_time=NO_THROTTLE,
                 error_code=error if error is not ErrorCode.none or not each else each[0])
    return b("LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=error,
             members=tuple(b("MemberResponse", member_id=member_id,
                             group_instance_id=instance_id, error_code=code)
                           for (member_id, instance_id), code in zip(members, each,
                                                                     strict=False)))
