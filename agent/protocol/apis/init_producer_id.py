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

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i64

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import COORDINATOR, failed


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    if request.transactional_id is not None:
        return _response(b, ErrorCode.transactional_id_authorization_failed)
    try:
        producer_id = await ctx.run(ctx.metadata.allocate_producer_id)
    except Exception as exc:
        return _response(b, failed("allocating a producer id", exc, COORDINATOR)[0])
    return _response(b, ErrorCode.none, producer_id)


def _response(b: Builder, error: ErrorCode, producer_id: int = -1) -> Any:
    return b("InitProducerIdResponse", throttle_time=NO_THROTTLE, error_code=error,
             producer_id=i64(producer_id), producer_epoch=i16(0 if producer_id >= 0 else -1))
