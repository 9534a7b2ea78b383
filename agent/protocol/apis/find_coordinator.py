"""FindCoordinator (key 10): a group's (key type 0) or a transactional id's (key type 1)
coordinator is the live agent holding its lease (metadata/groups.py, metadata/txnstate.py),
or, if none does, the agent `agent.placement.coordinator` picks from the live set, which
takes the lease at the key's first request; the client is given that agent's endpoint on
the listener it came in on (COORDINATOR_NOT_AVAILABLE if the agent has no such listener,
as Kafka answers). An empty key: INVALID_REQUEST. Keys are batched from v4. A key the
client may not DESCRIBE (the group, the transactional id) answers
GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED and is not located
(KafkaApis.getCoordinator)."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator import v0, v1, v2, v3, v4, v5, v6
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from agent.placement import coordinator, on_listener
from metadata import AgentInfo

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..session import SESSION

Request = (v0.FindCoordinatorRequest | v1.FindCoordinatorRequest | v2.FindCoordinatorRequest
           | v3.FindCoordinatorRequest | v4.FindCoordinatorRequest | v5.FindCoordinatorRequest
           | v6.FindCoordinatorRequest)
"""kio's FindCoordinatorRequest of each version served (0-6)."""
Batched = v4.FindCoordinatorRequest | v5.FindCoordinatorRequest | v6.FindCoordinatorRequest


GROUP, TRANSACTION = 0, 1  # key types: a group id, a transactional id
# Any other (v6's share key, 2) is INVALID_REQUEST, as KafkaApis answers one without a
# share coordinator (share groups are not served) or of an unknown type.
OTHER_MESSAGE = "siltstream serves group and transaction coordinators only"
GROUP_DENIED = "Group authorization failed."  # Kafka's Errors.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = "Transactional Id authorization failed."  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED

# (error, message, the coordinator) of one key.
Found = tuple[ErrorCode, str | None, AgentInfo | None]


def locate(ctx: ServerContext, keys: Sequence[str], listener: str,
           key_type: int = GROUP) -> list[Found]:
    """Each key's coordinator, at its endpoint on `listener` (blocking: metadata reads)."""
    live: list[AgentInfo] | None = None
    out: list[Found] = []
    what = "transactional id" if key_type == TRANSACTION else "group id"
    holder_of = ctx.metadata.transaction_coordinator if key_type == TRANSACTION \
        else ctx.metadata.group_coordinator
    for key in keys:
        if not key:
            out.append((ErrorCode.invalid_request, f"the {what} is empty", None))
            continue
        holder = holder_of(key)
        if holder is None:
            live = ctx.live_brokers() if live is None else live
            if not live:
                out.append((ErrorCode.coordinator_not_available, "no live agent", None))
                continue
            holder = coordinator(key, live)
        reachable = on_listener([holder], listener)
        if not reachable:
            out.append((ErrorCode.coordinator_not_available,
                        f"the coordinator has no listener {listener}", None))
            continue
        out.append((ErrorCode.none, None, reachable[0]))
    return out


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    batched = isinstance(request, Batched)  # several keys at once
    keys: list[str] = list(request.coordinator_keys) \
        if isinstance(request, Batched) else [request.key]
    key_type = GROUP if isinstance(request, v0.FindCoordinatorRequest) else int(request.key_type)
    if key_type not in (GROUP, TRANSACTION):
        found: list[Found] = [(ErrorCode.invalid_request, OTHER_MESSAGE, None)] * len(keys)
    else:
        # DESCRIBE on the key first (KafkaApis.getCoordinator): a denied key is not located.
        resource, denied = ((ResourceType.TRANSACTIONAL_ID, (
            ErrorCode.transactional_id_authorization_failed, TXN_DENIED, None))
            if key_type == TRANSACTION else
            (ResourceType.GROUP, (ErrorCode.group_authorization_failed, GROUP_DENIED, None)))
        visible = ctx.authz.allowed(Operation.DESCRIBE, resource, keys)
        located = iter(await ctx.run(locate, ctx, [k for k in keys if k in visible],
                                     SESSION.get().listener, key_type))
        found = [next(located) if key in visible else denied for key in keys]

    def fields(error: ErrorCode, message: str | None, at: AgentInfo | None) -> dict[str, object]:
        return {"error_code": error, "error_message": message,
                "node_id": i32(at.node_id if at else -1), "host": at.host if at else "",
                "port": i32(at.port if at else -1)}

    if batched:
        return b("FindCoordinatorResponse", throttle_time=NO_THROTTLE, coordinators=tuple(
            b("Coordinator", key=key, **fields(*f)) for key, f in zip(keys, found, strict=True)))
    return b("FindCoordinatorResponse", throttle_time=NO_THROTTLE, **fields(*found[0]))
