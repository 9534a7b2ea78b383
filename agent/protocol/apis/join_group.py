"""JoinGroup (key 11): joins a member to a group through this agent's group coordinator
(agent/groups/); the answer waits for the rebalance. A new member of v4+ first gets
MEMBER_ID_REQUIRED with its id and joins again with it (KIP-394); a static member
(group.instance.id, v5+) rejoining a Stable group with unchanged protocols gets its
assignment back without a rebalance.
READ on the group is needed (else GROUP_AUTHORIZATION_FAILED, as KafkaApis answers)."""

from __future__ import annotations

from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.schema.join_group import v0, v1, v2, v3, v4, v5, v6, v7, v8, v9
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from agent.groups.coordinator import JoinRequest
from metadata import GroupMember

from ..codec import NO_THROTTLE, Builder
from ..context import PEER, ServerContext

Static = (v5.JoinGroupRequest | v6.JoinGroupRequest | v7.JoinGroupRequest | v8.JoinGroupRequest
          | v9.JoinGroupRequest)  # group_instance_id (v5+)
Request = (v0.JoinGroupRequest | v1.JoinGroupRequest | v2.JoinGroupRequest | v3.JoinGroupRequest
           | v4.JoinGroupRequest | v5.JoinGroupRequest | v6.JoinGroupRequest | v7.JoinGroupRequest
           | v8.JoinGroupRequest | v9.JoinGroupRequest)
"""kio's JoinGroupRequest of each version served (0-9)."""
Rebalancing = (v1.JoinGroupRequest | v2.JoinGroupRequest | v3.JoinGroupRequest
               | v4.JoinGroupRequest | Static)  # rebalance_timeout (v1+)


REQUIRE_KNOWN_MEMBER_ID = 4  # the first version with the MEMBER_ID_REQUIRED handshake
NULLABLE_PROTOCOL = 7  # the first version whose protocol name may be null
SKIP_ASSIGNMENT = 9  # the first version whose leader can be told to skip assigning


def _ms(value: timedelta) -> int:
    return int(value.total_seconds() * 1000)


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.READ, ResourceType.GROUP, request.group_id):
        # JoinGroupRequest.getErrorResponse: no generation, member or leader
        return b("JoinGroupResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.group_authorization_failed, generation_id=i32(-1),
                 protocol_type=None,
                 protocol_name=None if b.version >= NULLABLE_PROTOCOL else "", leader="",
                 skip_assignment=False, member_id="", members=())
    session_ms = _ms(request.session_timeout)
    # v0 has no rebalance timeout: the session timeout stands for it (as in Kafka)
    rebalance_ms = _ms(request.rebalance_timeout) if isinstance(request, Rebalancing) \
        else session_ms
    instance_id = request.group_instance_id if isinstance(request, Static) else None
    result = await ctx.groups.join(JoinRequest(
        group_id=request.group_id,
        who=GroupMember(request.member_id, instance_id, header.client_id or "", PEER.get(),
                        rebalance_ms, session_ms),
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=b.version >= REQUIRE_KNOWN_MEMBER_ID,
        supports_skip_assignment=b.version >= SKIP_ASSIGNMENT))
    return b("JoinGroupResponse", throttle_time=NO_THROTTLE, error_code=result.error,
             generation_id=i32(result.generation), protocol_type=result.protocol_type,
             # nullable from v7 (null in error answers, as Kafka), a string before
             protocol_name=result.protocol_name if b.version >= NULLABLE_PROTOCOL
             else result.protocol_name or "", leader=result.leader,
             skip_assignment=result.skip_assignment, member_id=result.member_id,
             members=tuple(b("JoinGroupResponseMember", member_id=member_id,
                             group_instance_id=instance_id, metadata=metadata)
                           for member_id, instance_id, metadata in result.members))
