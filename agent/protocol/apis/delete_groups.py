"""DeleteGroups (key 42): empty groups are deleted with their committed offsets
(NON_EMPTY_GROUP while a group has members, GROUP_ID_NOT_FOUND if it has no state and no
offsets, NOT_COORDINATOR if another agent coordinates it)."""

from __future__ import annotations

from typing import Any

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    results = []
    for group_id in request.groups_names:
        error = await ctx.groups.delete_group(group_id)
        results.append(b("DeletableGroupResult", group_id=group_id, error_code=error))
    return b("DeleteGroupsResponse", throttle_time=NO_THROTTLE, results=tuple(results))
