"""Heartbeat (key 12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to
rejoin (agent/groups/)."""

from __future__ import annotations

from typing import Any

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    error = await ctx.groups.heartbeat(request.group_id, int(request.generation_id),
                                       request.member_id,
                                       getattr(request, "group_instance_id", None))
    return b("HeartbeatResponse", throttle_time=NO_THROTTLE, error_code=error)
