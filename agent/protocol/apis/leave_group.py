"""LeaveGroup (key 13): members leave at once (no session timeout to wait for) and the
group rebalances; one member before v3, a batch with per-member errors from v3 (a static
member may leave by its instance id alone)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    batched = hasattr(request, "members")
    members = [(m.member_id, m.group_instance_id) for m in request.members] if batched \
        else [(request.member_id, None)]
    error, each = await ctx.groups.leave(request.group_id, members)
    if not batched:
        return b("LeaveGroupResponse", throttle_time=NO_THROTTLE,
                 error_code=error if error is not ErrorCode.none or not each else each[0])
    return b("LeaveGroupResponse", throttle_time=NO_THROTTLE, error_code=error,
             members=tuple(b("MemberResponse", member_id=member_id,
                             group_instance_id=instance_id, error_code=code)
                           for (member_id, instance_id), code in zip(members, each,
                                                                     strict=False)))
