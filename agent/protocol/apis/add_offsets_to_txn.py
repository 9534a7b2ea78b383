"""AddOffsetsToTxn (key 25): the group joins the transactional id's ongoing transaction (as
Kafka adds the group's __consumer_offsets partition), so that its TxnOffsetCommit offsets
are committed or dropped with it. Errors as AddPartitionsToTxn's; PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2."""

from __future__ import annotations

from kio.schema.add_offsets_to_txn import v0, v1, v2, v3, v4
from kio.static.protocol import Entity, RequestHeader

from agent.transactions.transitions import AddPartitions

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import fenced_as

Request = (v0.AddOffsetsToTxnRequest | v1.AddOffsetsToTxnRequest | v2.AddOffsetsToTxnRequest
           | v3.AddOffsetsToTxnRequest | v4.AddOffsetsToTxnRequest)
"""kio's AddOffsetsToTxnRequest of each version served (0-4)."""
FENCED_SINCE = 2


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    reply = await ctx.txns.request(request.transactional_id, AddPartitions(
        int(request.producer_id), int(request.producer_epoch), groups=(request.group_id,)))
    return b("AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE,
             error_code=fenced_as(reply.error, request.__version__, FENCED_SINCE))
