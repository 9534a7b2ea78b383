"""AddOffsetsToTxn (key 25): the group joins the transactional id's ongoing transaction (as
Kafka adds the group's __consumer_offsets partition), so that its TxnOffsetCommit offsets
are committed or dropped with it. Errors as AddPartitionsToTxn's; PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2.
WRITE on the transactional id and READ on the group are needed (else
TRANSACTIONAL_ID_ or GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kio.schema.add_offsets_to_txn import v0, v1, v2, v3, v4
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
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
    # KafkaApis: WRITE on the transactional id, then READ on the group.
    denied = (ErrorCode.transactional_id_authorization_failed if not ctx.authz.allows(
        Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
        else ErrorCode.group_authorization_failed if not ctx.authz.allows(
            Operation.READ, ResourceType.GROUP, request.group_id) else None)
    if denied is not None:
        return b("AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE, error_code=denied)
    reply = await ctx.txns.request(request.transactional_id, AddPartitions(
        int(request.producer_id), int(request.producer_epoch), groups=(request.group_id,)))
    return b("AddOffsetsToTxnResponse", throttle_time=NO_THROTTLE,
             error_code=fenced_as(reply.error, request.__version__, FENCED_SINCE))
