"""DeleteGroups (key 42): empty groups are deleted with their committed offsets
(NON_EMPTY_GROUP while a group has members, GROUP_ID_NOT_FOUND if it has no state and no
offsets, NOT_COORDINATOR if another agent coordinates it)."""

from __future__ import annotations

from kio.schema.delete_groups import v0, v1, v2
from kio.static.protocol import Entity, RequestHeader

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v0.DeleteGroupsRequest | v1.DeleteGroupsRequest | v2.DeleteGroupsRequest)
"""kio's DeleteGroupsRequest of each version served (0-2)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    results = []
    for group_id in request.groups_names:
        error = await ctx.groups.delete_group(group_id)
        results.append(b("DeletableGroupResult", group_id=group_id, error_code=error))
    return b("DeleteGroupsResponse", throttle_time=NO_THROTTLE, results=tuple(results))
