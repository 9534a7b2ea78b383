"""ApiVersions (key 18): the supported versions, generated from the dispatch table."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext


def response(ctx: ServerContext, b: Builder, error: ErrorCode = ErrorCode.none) -> Any:
    """The table as an ApiVersions response of `b`'s version."""
    keys = tuple(b("ApiVersion", api_key=i16(a.key), min_version=i16(a.min_version),
                   max_version=i16(a.max_version))
                 for a in sorted(ctx.apis.values(), key=lambda a: a.key))
    return b("ApiVersionsResponse", error_code=error, api_keys=keys, throttle_time=NO_THROTTLE)


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    return response(ctx, b)
