"""DescribeGroups (key 15): each group's state, protocol and members, from its coordinator
here (NOT_COORDINATOR if another live agent coordinates it; as stored if none does). An
unknown group is Dead with no members before v6 and GROUP_ID_NOT_FOUND from v6 (KIP-1043),
as in Kafka. Member metadata and assignments are shown only while the group is Stable, as
Kafka's GroupMetadata.summary does. A group the client may not DESCRIBE answers
GROUP_AUTHORIZATION_FAILED (listed first, as KafkaApis does); asked for (v3+), a described
group's authorized operations are its bitfield."""

from __future__ import annotations

from kio.schema.describe_groups import v0, v1, v2, v3, v4, v5, v6
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from metadata import GroupRecord
from metadata.models import GROUP_DEAD, GROUP_STABLE

from ..authz import NOT_COMPUTED
from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v0.DescribeGroupsRequest | v1.DescribeGroupsRequest | v2.DescribeGroupsRequest
           | v3.DescribeGroupsRequest | v4.DescribeGroupsRequest | v5.DescribeGroupsRequest
           | v6.DescribeGroupsRequest)
"""kio's DescribeGroupsRequest of each version served (0-6)."""
NOT_FOUND_FROM = 6  # KIP-1043: an unknown group is GROUP_ID_NOT_FOUND, not Dead
OLD = v0.DescribeGroupsRequest | v1.DescribeGroupsRequest | v2.DescribeGroupsRequest
"""Versions without include_authorized_operations (v3 added it)."""


def _described(b: Builder, group_id: str, error: ErrorCode,
               record: GroupRecord | None, operations: int = NOT_COMPUTED) -> Entity:
    state = GROUP_DEAD if record is None else record.state
    stable = state == GROUP_STABLE
    members = () if record is None else tuple(
        b("DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
          client_id=m.client_id, client_host=m.client_host,
          member_metadata=m.metadata if stable else b"",
          member_assignment=m.assignment if stable else b"")
        for m in record.members)
    return b("DescribedGroup", error_code=error, group_id=group_id,
             group_state="" if error is not ErrorCode.none else state,
             protocol_type=(record.protocol_type or "") if record else "",
             protocol_data=(record.protocol_name or "") if record and stable else "",
             members=members, authorized_operations=i32(operations))


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    authz = ctx.authz
    allowed = authz.allowed(Operation.DESCRIBE, ResourceType.GROUP, request.groups)
    # Kafka answers the groups it may not describe first, then the others in order.
    out = [_described(b, g, ErrorCode.group_authorization_failed, None)
           for g in request.groups if g not in allowed]
    ops = not isinstance(request, OLD) and request.include_authorized_operations
    for group_id in request.groups:
        if group_id not in allowed:
            continue
        error, record = await ctx.groups.describe(group_id)
        if (b.version >= NOT_FOUND_FROM and error is ErrorCode.none
                and (record is None or record.state == GROUP_DEAD)):
            out.append(b("DescribedGroup", error_code=ErrorCode.group_id_not_found,
                         error_message=f"Group {group_id} not found.", group_id=group_id,
                         group_state="", protocol_type="", protocol_data="", members=(),
                         authorized_operations=i32(NOT_COMPUTED)))
            continue
        operations = (authz.operations(ResourceType.GROUP, group_id)
                      if ops and error is ErrorCode.none else NOT_COMPUTED)
        out.append(_described(b, group_id, error, record, operations))
    return b("DescribeGroupsResponse", throttle_time=NO_THROTTLE, groups=tuple(out))
