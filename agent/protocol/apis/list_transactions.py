"""ListTransactions (key 66): the transactions this agent coordinates (their lease is its)
and the stored ones nobody live coordinates that FindCoordinator sends here, so an admin
client asking every agent (kafka-transactions.sh list) sees each once; filtered by state
and producer id, and (v1+) by running longer than `duration_filter` ms. State names
Kafka does not have are answered in `unknown_state_filters`. COORDINATOR_NOT_AVAILABLE
before the agent registered.
Only the transactions whose id the client may DESCRIBE are listed.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.list_transactions import v0, v1
from kio.static.primitive import i64
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from agent.placement import coordinator
from metadata import TransactionRecord
from metadata.models import TXN_DEAD, TXN_STATES

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = v0.ListTransactionsRequest | v1.ListTransactionsRequest
"""kio's ListTransactionsRequest of each version served (0-1)."""


def mine(ctx: ServerContext, states: list[str], producer_ids: list[int]
         ) -> list[TransactionRecord] | None:
    """The transactions listed here (blocking: metadata reads); None before registering."""
    if ctx.registration is None:
        return None
    me = ctx.registration.agent_id
    records = ctx.metadata.list_transactions(states, producer_ids)
    holders = ctx.metadata.live_transaction_coordinators()
    live = ctx.live_brokers()
    return [r for r in records if r.state != TXN_DEAD and (
        holders.get(r.transactional_id) == me or (
        r.transactional_id not in holders and live
        and coordinator(r.transactional_id, live).agent_id == me))]


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    known = [s for s in request.state_filters if s in TXN_STATES]
    unknown = tuple(s for s in request.state_filters if s not in TXN_STATES)
    if request.state_filters and not known:
        records: list[TransactionRecord] | None = []
    else:
        records = await ctx.run(mine, ctx, known, [int(p) for p in request.producer_id_filters])
    if records is None:
        return b("ListTransactionsResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.coordinator_not_available, unknown_state_filters=(),
                 transaction_states=())
    duration = int(request.duration_filter) if isinstance(request, v1.ListTransactionsRequest) \
        else -1
    now = ctx.metadata.clock.now_ms()
    if duration >= 0:
        records = [r for r in records if now - r.start_ms > duration]
    visible = ctx.authz.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                (r.transactional_id for r in records))
    records = [r for r in records if r.transactional_id in visible]
    return b("ListTransactionsResponse", throttle_time=NO_THROTTLE,
             error_code=ErrorCode.none, unknown_state_filters=unknown,
             transaction_states=tuple(
                 b("TransactionState", transactional_id=r.transactional_id,
                   producer_id=i64(r.producer_id), transaction_state=r.state)
                 for r in records))
