"""SaslHandshake (key 17): the client names its SASL mechanism (agent/protocol/
authenticator.py). On a listener without SASL it is ILLEGAL_SASL_STATE, as KafkaApis
answers; a mechanism not enabled is UNSUPPORTED_SASL_MECHANISM with the enabled list, and
the connection closes after the answer."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.sasl_handshake import v0, v1
from kio.static.protocol import Entity, RequestHeader

from ..authenticator import AUTH
from ..codec import Builder
from ..context import ServerContext

Request = v0.SaslHandshakeRequest | v1.SaslHandshakeRequest
"""kio's SaslHandshakeRequest of each version served (0-1)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    auth = AUTH.get()
    if auth is None:
        return b("SaslHandshakeResponse", error_code=ErrorCode.illegal_sasl_state,
                 mechanisms=())
    version = 0 if isinstance(request, v0.SaslHandshakeRequest) else 1
    ok = auth.handshake(request.mechanism, version)
    return b("SaslHandshakeResponse",
             error_code=ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
             mechanisms=auth.service.mechanisms)
