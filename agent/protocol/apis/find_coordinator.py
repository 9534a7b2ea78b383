"""FindCoordinator (key 10): consumer groups are not served yet, so a group key answers
COORDINATOR_NOT_AVAILABLE (clients using assign() + seek never ask). Transactions are not
served: a transaction key answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which transactional
producers report at once (as InitProducerId does) instead of retrying forever."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

GROUP_MESSAGE = "siltstream does not serve consumer groups yet; use assign() + seek"
TRANSACTION_MESSAGE = "siltstream does not serve transactions"
TRANSACTION = 1  # key_type of a transactional id (0: group)


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    if getattr(request, "key_type", 0) == TRANSACTION:
        error, message = ErrorCode.transactional_id_authorization_failed, TRANSACTION_MESSAGE
    else:
        error, message = ErrorCode.coordinator_not_available, GROUP_MESSAGE
    if b.has("FindCoordinatorResponse", "coordinators"):  # v4+: a batch of keys
        return b("FindCoordinatorResponse", throttle_time=NO_THROTTLE, coordinators=tuple(
            b("Coordinator", key=key, node_id=i32(-1), host="", port=i32(-1),
              error_code=error, error_message=message)
            for key in request.coordinator_keys))
    return b("FindCoordinatorResponse", throttle_time=NO_THROTTLE, error_code=error,
             error_message=message, node_id=i32(-1), host="", port=i32(-1))
