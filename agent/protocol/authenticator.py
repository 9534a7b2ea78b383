"""SASL on the SASL_PLAINTEXT and SASL_SSL listeners, as Kafka's SaslServerAuthenticator
does it: each connection's `Authenticator` (the `AUTH` contextvar of its task), and the
agent's `SaslService` (enabled mechanisms, the user database, failed-login pacing).

A connection starts in HANDSHAKE: it may send one ApiVersions (answered: a second one closes
it, as Kafka's HANDSHAKE_REQUEST state) and SaslHandshake; any other request closes it
unanswered ("Unexpected Kafka request of type X during SASL handshake"), decoded or not.
A handshake naming a mechanism not in sasl.enabled.mechanisms is answered
UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection closes. After a good
one the connection is in AUTHENTICATE: SaslAuthenticate requests (v1 handshake), or raw
size-prefixed tokens (v0 handshake, Kafka's pre-KIP-152 framing), carry the mechanism's
tokens. Any other request there (a second SaslHandshake, ApiVersions, Metadata...) is
Kafka's IllegalSaslStateException: once it decodes, it is answered ILLEGAL_SASL_STATE in its
own API's response (error_responses.py), then the connection closes; one that does not
decode closes it unanswered. A finished exchange sets the session's principal
(`User:<name>`) and the connection may send anything. A failed one is answered
SASL_AUTHENTICATION_FAILED with Kafka's message (never saying whether the user exists),
counted (silt_sasl_authentications{outcome="failed"}) and logged with the principal,
address and mechanism (never the token), after connection.failed.authentication.delay.ms
doubled for each further failure from that address within a minute (up to 64 times); then
the connection closes. Frames before authentication are bounded by
sasl.server.max.receive.size, and a connection not authenticated within
sasl.authentication.timeout.ms of its accept is closed (the server's sweep).

Re-authentication (KIP-368): with connections.max.reauth.ms > 0, SaslAuthenticate v1+
answers the session's lifetime (the smaller of it and an OAUTHBEARER token's); past it any
request but SaslHandshake closes the connection. An authenticated client may send
SaslHandshake + SaslAuthenticate again at any time: same mechanism and principal (else
SASL_AUTHENTICATION_FAILED, as Kafka), and the session is renewed; in between, any other
request is ILLEGAL_SASL_STATE as above.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import telemetry
from agent.config import AgentConfig
from agent.sasl.errors import AuthenticationFailed
from agent.sasl.oauth import NAME as OAUTHBEARER
from agent.sasl.oauth import Keys, OAuthBearerServer, OAuthSettings
from agent.sasl.plain import NAME as PLAIN
from agent.sasl.plain import PlainServer
from agent.sasl.scram import MECHANISMS as SCRAM
from agent.sasl.scram import ScramServer
from metadata import MetadataStore, ScramCredential

from .session import ANONYMOUS

log = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
HANDSHAKE, AUTHENTICATE, COMPLETE = "handshake", "authenticate", "complete"
FAILURE_WINDOW_S = 60.0
MAX_DOUBLINGS = 6


class Exchange(Protocol):
    """One mechanism's server side (agent/sasl/): tokens in, replies out."""

    done: bool

    @property
    def principal(self) -> str: ...

    def step(self, token: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a SaslAuthenticate (or raw token) is answered with."""

    error: str | None  # the message of SASL_AUTHENTICATION_FAILED, None if it went well
    token: bytes = b""
    lifetime_ms: int = 0  # the session's lifetime once authenticated (0: not, or forever)


class SaslService:
    """The agent's SASL side: which mechanisms, whose credentials, how failures are paced."""

    def __init__(self, config: AgentConfig, metadata: MetadataStore,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.metadata = metadata
        self.mechanisms = config.enabled_mechanisms()
        self.clock = clock
        self._failures: dict[str, tuple[int, float]] = {}  # ip -> (recent count, last)
        self._keys = None if OAUTHBEARER not in self.mechanisms else Keys(OAuthSettings(
            config.sasl_oauthbearer_jwks_endpoint_url,
            config.sasl_oauthbearer_expected_issuer,
            tuple(a.strip() for a in config.sasl_oauthbearer_expected_audience.split(",")
                  if a.strip()),
            config.sasl_oauthbearer_sub_claim_name, config.sasl_oauthbearer_scope_claim_name,
            config.sasl_oauthbearer_clock_skew_seconds,
            config.sasl_oauthbearer_jwks_endpoint_refresh_ms))

    def exchange(self, mechanism: str) -> Exchange:
        """A new exchange of an enabled `mechanism`."""
        if mechanism == PLAIN:
            return PlainServer(self.metadata.scram_credentials)
        if mechanism in SCRAM:
            return ScramServer(mechanism, self._scram_credential)
        assert self._keys is not None and mechanism == OAUTHBEARER, mechanism
        return OAuthBearerServer(self._keys)

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return next((c for c in self.metadata.scram_credentials(user)
                     if c.mechanism == mechanism), None)

    def failure_delay(self, ip: str) -> float:
        """Record a failed login from `ip`; seconds its answer waits."""
        now = self.clock()
        count, last = self._failures.get(ip, (0, now))
        count = count + 1 if now - last < FAILURE_WINDOW_S else 1
        self._failures[ip] = (count, now)
        if len(self._failures) > 10_000:  # forget the quiet addresses
            self._failures = {k: v for k, v in self._failures.items()
                              if now - v[1] < FAILURE_WINDOW_S}
        base: float = self.config.connection_failed_authentication_delay_ms / 1000
        return base * float(2 ** min(count - 1, MAX_DOUBLINGS))


@dataclass(eq=False)
class Authenticator:
    """One SASL connection's authentication state (see the module docstring)."""

    service: SaslService
    ip: str
    accepted: float  # monotonic, when the connection was accepted
    state: str = HANDSHAKE
    mechanism: str = ""
    principal: str | None = None  # set once authenticated
    expires: float | None = None  # monotonic end of the session (None: never)
    raw: bool = False  # v0 handshake: tokens come as raw frames
    versions_answered: bool = False  # an ApiVersions was served during the handshake
    # Why the connection closes once this answer is sent (a refusal label), or None.
    close_after_reply: str | None = None
    _exchange: Exchange | None = field(default=None, repr=False)
    _bad_mechanism: str | None = None  # a re-authentication asked for another mechanism

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def refusal(self, api_key: int, now: float) -> str | None:
        """Why a request of `api_key` closes the connection unanswered, before it is
        decoded (Kafka's handleKafkaRequest, an expired session), or None."""
        if self.state == AUTHENTICATE:
            return None  # `illegal` says
        if self.authenticated:
            if self.expires is not None and now > self.expires and api_key != SASL_HANDSHAKE:
                return "SASL session expired (connections.max.reauth.ms)"
            return None
        if api_key not in (API_VERSIONS, SASL_HANDSHAKE):
            return f"unexpected Kafka request of type {api_key} during SASL handshake"
        if api_key == API_VERSIONS and self.versions_answered:
            return "unexpected ApiVersions request received during SASL handshake (a second one)"
        return None

    def illegal(self, api_key: int) -> str | None:
        """Why a request of `api_key` is ILLEGAL_SASL_STATE (answered in its API's
        shape once decoded, then the connection closes), or None: any request but
        SaslAuthenticate in the middle of an exchange begun by a v1 handshake."""
        if self.state != AUTHENTICATE or self.raw or api_key == SASL_AUTHENTICATE:
            return None
        during = "re-authentication" if self.authenticated else "authentication"
        return f"unexpected Kafka request of type {api_key} during SASL {during}"

    def handshake(self, mechanism: str, version: int) -> bool:
        """A SaslHandshake for `mechanism`: whether it is enabled (if not, the connection
        closes after the answer)."""
        if mechanism not in self.service.mechanisms:
            self.close_after_reply = "sasl_failed"
            log.info("connection from %s: SASL mechanism %r not enabled", self.ip, mechanism)
            return False
        if self.authenticated and mechanism != self.mechanism:
            self._bad_mechanism = mechanism
        else:
            self.mechanism = mechanism
        self._exchange = self.service.exchange(mechanism)
        self.state, self.raw = AUTHENTICATE, version == 0
        return True

    def authenticate(self, token: bytes) -> tuple[Outcome, float]:
        """One client token (blocking: credential reads, PBKDF2): the outcome, and how long
        its answer must wait (a failure's pacing). A failure closes after the answer."""
        exchange = self._exchange
        assert exchange is not None and self.state == AUTHENTICATE
        mechanism = self._bad_mechanism or self.mechanism
        try:
            if self._bad_mechanism is not None:
                raise AuthenticationFailed(
                    f"SASL mechanism changed from {self.mechanism} to {self._bad_mechanism}"
                    " during re-authentication")
            reply = exchange.step(token)
            if not exchange.done:
                return Outcome(None, reply), 0.0
            principal = "User:" + exchange.principal
            if self.principal is not None and principal != self.principal:
                raise AuthenticationFailed(
                    f"Cannot change principals during re-authentication from"
                    f" {self.principal}: {principal}")
        except AuthenticationFailed as exc:
            self.close_after_reply = "sasl_failed"
            self.state = COMPLETE if self.authenticated else HANDSHAKE
            telemetry.sasl_authentication(mechanism, "failed")
            log.info("connection from %s: SASL %s authentication failed (%s)", self.ip,
                     mechanism, exc)
            message = (f"Authentication failed during authentication due to invalid"
                       f" credentials with SASL mechanism {mechanism}")
            return Outcome(message), self.service.failure_delay(self.ip)
        self.principal, self.state, self._exchange = principal, COMPLETE, None
        lifetime_ms = self.service.config.connections_max_reauth_ms
        token_ms: int | None = getattr(exchange, "lifetime_ms", None)  # OAUTHBEARER's
        if token_ms is not None:
            lifetime_ms = min(lifetime_ms, token_ms) if lifetime_ms else token_ms
        now = self.service.clock()
        self.expires = now + lifetime_ms / 1000 if lifetime_ms else None
        telemetry.sasl_authentication(mechanism, "ok")
        log.info("connection from %s: authenticated as %s (SASL %s)", self.ip, principal,
                 mechanism)
        return Outcome(None, reply, lifetime_ms), 0.0

    def session_principal(self) -> str:
        return self.principal or ANONYMOUS


# The authenticator of the connection whose request is being handled (None: the listener
# has no SASL), set by the server in each connection's task.
AUTH: contextvars.ContextVar[Authenticator | None] = contextvars.ContextVar("auth",
                                                                            default=None)
