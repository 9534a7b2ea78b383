"""DeleteGroups (key 42): empty groups are deleted with their committed offsets
(NON_EMPTY_GROUP while a group has members, GROUP_ID_NOT_FOUND if it has no state and no
offsets, NOT_COORDINATOR if another agent coordinates it); each group once, those the
client may not DELETE answered GROUP_AUTHORIZATION_FAILED after the others, as Kafka."""

from __future__ import annotations

from kio.schema.delete_groups import v0, v1, v2
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v0.DeleteGroupsRequest | v1.DeleteGroupsRequest | v2.DeleteGroupsRequest)
"""kio's DeleteGroupsRequest of each version served (0-2)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    groups = list(dict.fromkeys(request.groups_names))
    deletable = ctx.authz.allowed(Operation.DELETE, ResourceType.GROUP, groups)
    results = []
    for group_id in groups:
        if group_id in deletable:
            error = await ctx.groups.delete_group(group_id)
            results.append(b("DeletableGroupResult", group_id=group_id, error_code=error))
    # Kafka lists the groups it may not delete after the others.
    results += [b("DeletableGroupResult", group_id=group_id,
                  error_code=ErrorCode.group_authorization_failed)
                for group_id in groups if group_id not in deletable]
    return b("DeleteGroupsResponse", throttle_time=NO_THROTTLE, results=tuple(results))
