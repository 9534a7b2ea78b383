"""InitProducerId (key 22). Without a transactional id: a new producer id from the metadata
store (`allocate_producer_id`, unique across agents), epoch 0, as Kafka answers (every call a
fresh id); COORDINATOR_NOT_AVAILABLE (retriable) when the store cannot allocate one. With a
transactional id: its coordinator (agent/transactions/) bumps the epoch, fencing the previous
producer and aborting its open transaction (CONCURRENT_TRANSACTIONS until that abort is
complete), bounded by transaction.max.timeout.ms (INVALID_TRANSACTION_TIMEOUT); v3+ may
name the producer id and epoch the client has (KIP-360: one of them -1 without the other:
INVALID_REQUEST). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4, as KafkaApis answers.
Authorization first (KafkaApis): WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE on
the cluster or WRITE on some topic (Kafka 3.0+), else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id import v0, v1, v2, v3, v4
from kio.static.primitive import i16, i64
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from agent.transactions.transitions import InitProducer

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import COORDINATOR, failed, fenced_as

Request = (v0.InitProducerIdRequest | v1.InitProducerIdRequest | v2.InitProducerIdRequest
           | v3.InitProducerIdRequest | v4.InitProducerIdRequest)
"""kio's InitProducerIdRequest of each version served (0-4)."""
FENCED_SINCE = 4  # clients of older versions get INVALID_PRODUCER_EPOCH


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    authz = ctx.authz
    if request.transactional_id is not None:
        if not authz.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                            request.transactional_id):
            return _response(b, ErrorCode.transactional_id_authorization_failed)
        return await _transactional(ctx, request, b)
    # An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
    # (Kafka 3.0+, KIP-679: authorizeByResourceType), else CLUSTER_AUTHORIZATION_FAILED.
    if not (authz.allows(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
            or authz.allows_any(Operation.WRITE, ResourceType.TOPIC)):
        return _response(b, ErrorCode.cluster_authorization_failed)
    try:
        producer_id = await ctx.run(ctx.metadata.allocate_producer_id)
    except Exception as exc:
        return _response(b, failed("allocating a producer id", exc, COORDINATOR)[0])
    return _response(b, ErrorCode.none, producer_id, 0)


async def _transactional(ctx: ServerContext, request: Request, b: Builder) -> Entity:
    txn_id = request.transactional_id
    assert txn_id is not None
    pid, epoch = -1, -1
    if isinstance(request, v3.InitProducerIdRequest | v4.InitProducerIdRequest):
        pid, epoch = int(request.producer_id), int(request.producer_epoch)
    if not txn_id or (pid == -1) != (epoch == -1):
        return _response(b, ErrorCode.invalid_request)
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    reply = await ctx.txns.request(txn_id, InitProducer(timeout_ms, pid, epoch))
    error = fenced_as(reply.error, request.__version__, FENCED_SINCE)
    return _response(b, error, reply.producer_id, reply.producer_epoch)


def _response(b: Builder, error: ErrorCode, producer_id: int = -1,
              producer_epoch: int = -1) -> Entity:
    return b("InitProducerIdResponse", throttle_time=NO_THROTTLE, error_code=error,
             producer_id=i64(producer_id), producer_epoch=i16(producer_epoch))
