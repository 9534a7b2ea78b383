"""ApiVersions (key 18): the supported versions, generated from the dispatch table."""

from __future__ import annotations

from kio.schema.api_versions import v0, v1, v2, v3, v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16
from kio.static.protocol import Entity, RequestHeader

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v0.ApiVersionsRequest | v1.ApiVersionsRequest | v2.ApiVersionsRequest
           | v3.ApiVersionsRequest | v4.ApiVersionsRequest)
"""kio's ApiVersionsRequest of each version served (0-4: v4 as v3, KAFKA-17011)."""


def response(ctx: ServerContext, b: Builder, error: ErrorCode = ErrorCode.none) -> Entity:
    """The table as an ApiVersions response of `b`'s version."""
    keys = tuple(b("ApiVersion", api_key=i16(a.key), min_version=i16(a.min_version),
                   max_version=i16(a.max_version))
                 for a in sorted(ctx.apis.values(), key=lambda a: a.key))
    return b("ApiVersionsResponse", error_code=error, api_keys=keys, throttle_time=NO_THROTTLE)


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    return response(ctx, b)
