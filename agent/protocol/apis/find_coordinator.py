"""FindCoordinator (key 10): consumer groups are not served yet, so every key answers
COORDINATOR_NOT_AVAILABLE (clients using assign() + seek never ask)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

MESSAGE = "siltstream does not serve consumer groups yet; use assign() + seek"


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    error = ErrorCode.coordinator_not_available
    if b.has("FindCoordinatorResponse", "coordinators"):  # v4+: a batch of keys
        return b("FindCoordinatorResponse", throttle_time=NO_THROTTLE, coordinators=tuple(
            b("Coordinator", key=key, node_id=i32(-1), host="", port=i32(-1),
              error_code=error, error_message=MESSAGE)
            for key in request.coordinator_keys))
    return b("FindCoordinatorResponse", throttle_time=NO_THROTTLE, error_code=error,
             error_message=MESSAGE, node_id=i32(-1), host="", port=i32(-1))
