"""ListGroups (key 16): the groups this agent coordinates (those its id held before a
restart included, at once), and the stored ones nobody coordinates that FindCoordinator
sends here, so a client asking every agent (as admin clients do) sees each group once;
v4+ filters by state, v5+ by type (KIP-848), both case-insensitive as Kafka's
GroupCoordinator (Group.GroupType.parse): every group here is "classic", so a types filter
not naming it lists none. COORDINATOR_NOT_AVAILABLE before the agent registered. Without
DESCRIBE on the cluster a client sees only the groups it may DESCRIBE (KafkaApis)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.list_groups import v0, v1, v2, v3, v4, v5
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from agent.groups.errors import CoordinatorNotRegisteredError

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import error_code

Request = (v0.ListGroupsRequest | v1.ListGroupsRequest | v2.ListGroupsRequest
           | v3.ListGroupsRequest | v4.ListGroupsRequest | v5.ListGroupsRequest)
"""kio's ListGroupsRequest of each version served (0-5)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    live = await ctx.run(ctx.live_brokers)
    try:
        groups = await ctx.groups.listed(live)
    except CoordinatorNotRegisteredError as exc:
        return b("ListGroupsResponse", throttle_time=NO_THROTTLE, error_code=error_code(exc),
                 groups=())
    if not ctx.authz.allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # Without DESCRIBE on the cluster, only the groups it may describe (KafkaApis).
        visible = ctx.authz.allowed(Operation.DESCRIBE, ResourceType.GROUP,
                                    (g.group_id for g in groups))
        groups = [g for g in groups if g.group_id in visible]
    states = {s.lower() for s in request.states_filter} \
        if isinstance(request, v4.ListGroupsRequest | v5.ListGroupsRequest) else set()
    types = {t.lower() for t in request.types_filter} \
        if isinstance(request, v5.ListGroupsRequest) else set()
    if types and "classic" not in types:
        return b("ListGroupsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                 groups=())
    return b("ListGroupsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
             groups=tuple(b("ListedGroup", group_id=g.group_id,
                            protocol_type=g.protocol_type or "", group_state=g.state,
                            group_type="classic")
                          for g in groups
                          if not states or g.state.lower() in states))
