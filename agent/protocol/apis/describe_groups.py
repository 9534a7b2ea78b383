"""DescribeGroups (key 15): each group's state, protocol and members, from its coordinator
here (NOT_COORDINATOR if another live agent coordinates it; as stored if none does). An
unknown group is Dead with no members before v6 and GROUP_ID_NOT_FOUND from v6 (KIP-1043),
as in Kafka. Member metadata and assignments are shown only while the group is Stable, as
Kafka's GroupMetadata.summary does."""

from __future__ import annotations

from kio.schema.describe_groups import v0, v1, v2, v3, v4, v5, v6
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from metadata import GroupRecord
from metadata.models import GROUP_DEAD, GROUP_STABLE

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v0.DescribeGroupsRequest | v1.DescribeGroupsRequest | v2.DescribeGroupsRequest
           | v3.DescribeGroupsRequest | v4.DescribeGroupsRequest | v5.DescribeGroupsRequest
           | v6.DescribeGroupsRequest)
"""kio's DescribeGroupsRequest of each version served (0-6)."""
NOT_FOUND_FROM = 6  # KIP-1043: an unknown group is GROUP_ID_NOT_FOUND, not Dead


UNKNOWN_OPERATIONS = -(2**31)  # Kafka's "authorized operations not computed"


def _described(b: Builder, group_id: str, error: ErrorCode,
               record: GroupRecord | None) -> Entity:
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
             members=members, authorized_operations=i32(UNKNOWN_OPERATIONS))


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    out = []
    for group_id in request.groups:
        error, record = await ctx.groups.describe(group_id)
        if (b.version >= NOT_FOUND_FROM and error is ErrorCode.none
                and (record is None or record.state == GROUP_DEAD)):
            out.append(b("DescribedGroup", error_code=ErrorCode.group_id_not_found,
                         error_message=f"Group {group_id} not found.", group_id=group_id,
                         group_state="", protocol_type="", protocol_data="", members=(),
                         authorized_operations=i32(UNKNOWN_OPERATIONS)))
            continue
        out.append(_described(b, group_id, error, record))
    return b("DescribeGroupsResponse", throttle_time=NO_THROTTLE, groups=tuple(out))
