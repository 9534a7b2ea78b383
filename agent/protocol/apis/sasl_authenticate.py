"""SaslAuthenticate (key 36): one token of the SASL exchange a SaslHandshake (v1) began
(agent/protocol/authenticator.py). Out of turn (no SASL on the listener, no handshake
before, the exchange already over) it is ILLEGAL_SASL_STATE, as KafkaApis answers. A failure
is SASL_AUTHENTICATION_FAILED after the failure's pacing delay, and the connection closes
after the answer; from v1 a finished exchange answers the session's lifetime (KIP-368)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate import v0, v1, v2
from kio.static.primitive import i64Timedelta
from kio.static.protocol import Entity, RequestHeader

from ..authenticator import AUTH, AUTHENTICATE
from ..codec import Builder
from ..context import ServerContext
from ..session import SESSION

Request = v0.SaslAuthenticateRequest | v1.SaslAuthenticateRequest | v2.SaslAuthenticateRequest
"""kio's SaslAuthenticateRequest of each version served (0-2)."""


def _lifetime(ms: int) -> i64Timedelta:
    return i64Timedelta.parse(timedelta(milliseconds=ms))


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    auth = AUTH.get()
    if auth is None or auth.state != AUTHENTICATE or auth.raw:
        message = ("SaslAuthenticate request received after successful authentication"
                   if auth is not None and auth.authenticated
                   else "Unexpected SaslAuthenticate request")
        return b("SaslAuthenticateResponse", error_code=ErrorCode.illegal_sasl_state,
                 error_message=message, auth_bytes=b"", session_lifetime=_lifetime(0))
    outcome, delay = await ctx.run(auth.authenticate, bytes(request.auth_bytes))
    if outcome.error is not None:
        await asyncio.sleep(delay)
        return b("SaslAuthenticateResponse", error_code=ErrorCode.sasl_authentication_failed,
                 error_message=outcome.error, auth_bytes=b"", session_lifetime=_lifetime(0))
    if auth.authenticated:
        SESSION.set(SESSION.get().with_principal(auth.session_principal()))
    return b("SaslAuthenticateResponse", error_code=ErrorCode.none, error_message=None,
             auth_bytes=outcome.token, session_lifetime=_lifetime(outcome.lifetime_ms))
