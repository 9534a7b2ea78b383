"""EndTxn (key 26): commit or abort the transactional id's transaction. The decision
(PrepareCommit/PrepareAbort) is stored, then one marker per partition goes through the
agent's flush, whose metadata commit also completes the transaction and makes its group
offsets visible; the answer comes after that commit (a retry then gets NONE, or
CONCURRENT_TRANSACTIONS while it is in progress). Served to v4 (v5 is transactions V2,
KIP-890 part 2: an epoch bump per transaction, not served); PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2.
WRITE on the transactional id is needed (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kio.schema.end_txn import v0, v1, v2, v3, v4
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from agent.transactions.transitions import End

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import fenced_as

Request = (v0.EndTxnRequest | v1.EndTxnRequest | v2.EndTxnRequest | v3.EndTxnRequest
           | v4.EndTxnRequest)
"""kio's EndTxnRequest of each version served (0-4)."""
FENCED_SINCE = 2


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                            request.transactional_id):
        return b("EndTxnResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.transactional_id_authorization_failed)
    reply = await ctx.txns.request(request.transactional_id, End(
        int(request.producer_id), int(request.producer_epoch), bool(request.committed)))
    return b("EndTxnResponse", throttle_time=NO_THROTTLE,
             error_code=fenced_as(reply.error, request.__version__, FENCED_SINCE))
