"""PLAIN (RFC 4616) as Kafka's PlainSaslServer serves it: one message,
`[authzid] NUL authcid NUL passwd`, checked here against the user's SCRAM credentials (the
same salted keys SCRAM uses: the password is never stored). An authzid other than the user,
an empty user or password, or no credential that the password matches: AuthenticationFailed.
PLAIN sends the password itself: serve it over TLS (SASL_SSL) only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from metadata.models import ScramCredential

from .errors import AuthenticationFailed
from .scram import verify_password

NAME = "PLAIN"

Credentials = Callable[[str], Sequence[ScramCredential]]
"""user -> the user's SCRAM credentials (every mechanism it has)."""


class PlainServer:
    """One PLAIN exchange, server side: one `step`, then `principal`."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.user = ""
        self.done = False

    @property
    def principal(self) -> str:
        return self.user

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("the PLAIN exchange is over")
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("invalid PLAIN message: expected 3 parts")
        try:
            authzid, user = parts[0].decode(), parts[1].decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("invalid PLAIN message: not UTF-8") from None
        password = parts[2]
        if not user or not password:
            raise AuthenticationFailed("invalid PLAIN message: empty user or password")
        if authzid and authzid != user:
            raise AuthenticationFailed("the authorization id is not the user name")
        if not any(verify_password(c, password) for c in self.credentials(user)):
            raise AuthenticationFailed(f"invalid credentials for user {user!r}")
        self.user, self.done = user, True
        return b""
