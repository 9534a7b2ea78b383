"""InitProducerId (key 22): a new producer id, epoch 0, for an idempotent producer.

Producer ids come from the metadata store (`allocate_producer_id`), so they are unique across
agents. As Kafka does for a request without a transactional id, every call allocates a fresh
id (a producer re-initialising after an error gets a new id, not a bumped epoch). A
transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED: transactions are not served, and
that is the error clients treat as fatal with a clear message (Kafka's answer to a principal
that may not use transactional ids), where a retriable code would make them wait. When the
metadata store cannot allocate an id (the database unreachable), COORDINATOR_NOT_AVAILABLE:
retriable, the client asks again.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id import v0, v1, v2, v3, v4
from kio.static.primitive import i16, i64
from kio.static.protocol import Entity, RequestHeader

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import COORDINATOR, failed

Request = (v0.InitProducerIdRequest | v1.InitProducerIdRequest | v2.InitProducerIdRequest
           | v3.InitProducerIdRequest | v4.InitProducerIdRequest)
"""kio's InitProducerIdRequest of each version served (0-4)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if request.transactional_id is not None:
        return _response(b, ErrorCode.transactional_id_authorization_failed)
    try:
        producer_id = await ctx.run(ctx.metadata.allocate_producer_id)
    except Exception as exc:
        return _response(b, failed("allocating a producer id", exc, COORDINATOR)[0])
    return _response(b, ErrorCode.none, producer_id)


def _response(b: Builder, error: ErrorCode, producer_id: int = -1) -> Entity:
    return b("InitProducerIdResponse", throttle_time=NO_THROTTLE, error_code=error,
             producer_id=i64(producer_id), producer_epoch=i16(0 if producer_id >= 0 else -1))
