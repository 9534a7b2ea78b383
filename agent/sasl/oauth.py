"""OAUTHBEARER (RFC 7628) as Kafka's OAuthBearerSaslServer with its JWT validator
(OAuthBearerValidatorCallbackHandler): the client's one message,
`n,[a=authzid],\\x01auth=Bearer <JWT>\\x01[key=value\\x01]...\\x01`, carries a JWT signed by a
key of the JWKS (`sasl.oauthbearer.jwks.endpoint.url`: an https URL, fetched and cached
by PyJWT, or a file path or file:// URL, read again when the file changes). The token must
be signed with an asymmetric algorithm the key allows (never `none` nor a shared secret),
hold `exp` (and `iat`/`nbf` if present) valid within `sasl.oauthbearer.clock.skew.seconds`,
the expected issuer and one of the expected audiences when those are set, a subject claim
(`sasl.oauthbearer.sub.claim.name`: the principal's name) and, if present, a scope claim
that is a string or a list of strings. The session's lifetime is the token's remaining time.

A token that does not validate is answered as Kafka's server answers it: an error challenge
`{"status":"invalid_token"}` that the client acknowledges with a lone 0x01, then
AuthenticationFailed (SASL_AUTHENTICATION_FAILED).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import jwt

from .errors import AuthenticationFailed

NAME = "OAUTHBEARER"
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
              "ES512", "EdDSA")
_MESSAGE = re.compile(rb"n,(?:a=([^,]*))?,\x01((?:[A-Za-z]+=[\x21-\x7e \t]*\x01)*)\x01")
_INVALID = json.dumps({"status": "invalid_token"}).encode()


@dataclass(frozen=True, slots=True)
class OAuthSettings:
    """What a token is checked against (the agent's sasl.oauthbearer.* settings)."""

    jwks: str  # https URL, file:// URL or path
    issuer: str = ""  # "" = not checked
    audiences: tuple[str, ...] = ()  # () = not checked
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    clock_skew_s: int = 30
    refresh_ms: int = 3_600_000


class Keys:
    """The JWKS signing keys, shared by every exchange of the agent (thread-safe)."""

    def __init__(self, settings: OAuthSettings) -> None:
        self.settings = settings
        location = settings.jwks
        self._path = location.removeprefix("file://") if "://" not in location or \
            location.startswith("file://") else None
        self._client = None if self._path is not None else jwt.PyJWKClient(
            location, lifespan=settings.refresh_ms / 1000, timeout=10)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._set: jwt.PyJWKSet | None = None

    def key(self, token: str) -> jwt.PyJWK:
        """The JWKS key that signed `token` (by its `kid`); AuthenticationFailed if none."""
        try:
            if self._client is not None:
                return self._client.get_signing_key_from_jwt(token)
            kid = jwt.get_unverified_header(token).get("kid")
            for key in self._file_keys().keys:
                if kid is None or key.key_id == kid:
                    return key
        except (jwt.PyJWKError, jwt.PyJWKClientError, jwt.DecodeError, OSError) as exc:
            raise AuthenticationFailed(f"no JWKS key for the token ({exc})") from None
        raise AuthenticationFailed(f"no JWKS key with kid {kid!r}")

    def _file_keys(self) -> jwt.PyJWKSet:
        assert self._path is not None
        st = os.stat(self._path)
        stamp = (st.st_mtime_ns, st.st_size)
        with self._lock:
            if self._set is None or stamp != self._stamp:
                with open(self._path, encoding="utf-8") as f:
                    self._set, self._stamp = jwt.PyJWKSet.from_json(f.read()), stamp
            return self._set


class OAuthBearerServer:
    """One OAUTHBEARER exchange, server side."""

    def __init__(self, keys: Keys, now: Any = time.time) -> None:
        self.keys = keys
        self.now = now
        self.user = ""
        self.done = False
        self.lifetime_ms: int | None = None
        self._failed: str | None = None

    @property
    def principal(self) -> str:
        return self.user

    def step(self, token: bytes) -> bytes:
        if self._failed is not None:  # the client's acknowledgement of the error challenge
            raise AuthenticationFailed(self._failed)
        m = _MESSAGE.fullmatch(token)
        if m is None:
            raise AuthenticationFailed("invalid OAUTHBEARER initial client response")
        pairs = dict(p.split(b"=", 1) for p in m[2].split(b"\x01") if p)
        scheme, _, bearer = pairs.get(b"auth", b"").decode(errors="replace").partition(" ")
        if scheme.lower() != "bearer" or not bearer:
            raise AuthenticationFailed("invalid OAUTHBEARER auth value")
        try:
            claims = self._validate(bearer.strip())
        except AuthenticationFailed as exc:
            self._failed = str(exc)
            return _INVALID
        user = claims[self.keys.settings.sub_claim]
        if m[1] and m[1].decode(errors="replace") != user:
            raise AuthenticationFailed("the authorization id is not the token's subject")
        self.user, self.done = user, True
        self.lifetime_ms = max(0, int(claims["exp"] * 1000 - self.now() * 1000))
        return b""

    def _validate(self, token: str) -> dict[str, Any]:
        s = self.keys.settings
        key = self.keys.key(token)
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=list(ASYMMETRIC),
                audience=list(s.audiences) or None, issuer=s.issuer or None,
                leeway=s.clock_skew_s,
                options={"require": ["exp"], "verify_aud": bool(s.audiences),
                         "verify_iss": bool(s.issuer)})
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"invalid JWT: {exc}") from None
        sub = claims.get(s.sub_claim)
        if not isinstance(sub, str) or not sub.strip():
            raise AuthenticationFailed(f"the JWT has no {s.sub_claim!r} claim")
        scope = claims.get(s.scope_claim)
        if scope is not None and not (isinstance(scope, str) or (
                isinstance(scope, list) and all(isinstance(x, str) for x in scope))):
            raise AuthenticationFailed(f"the JWT's {s.scope_claim!r} claim is not a string"
                                       " or a list of strings")
        if not isinstance(claims.get("exp"), int | float):
            raise AuthenticationFailed("the JWT's exp claim is not a number")
        return claims
