"""The SASL mechanisms and the connection state machine, without sockets: SCRAM against
RFC 7677's example exchange and an independent client, PLAIN against the same salted
credentials, and the authenticator's gating, pacing and re-authentication rules."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from agent.config import AgentConfig
from agent.protocol.authenticator import (
    AUTHENTICATE,
    COMPLETE,
    Authenticator,
    SaslService,
)
from agent.sasl.errors import AuthenticationFailed, UnacceptableCredential
from agent.sasl.oauth import Keys, OAuthBearerServer, OAuthSettings
from agent.sasl.plain import PlainServer
from agent.sasl.scram import ScramServer, make_credential
from metadata import ScramCredential

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_rfc7677_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    """RFC 7677 section 3: user "user", password "pencil": the server's first message and
    signature are the RFC's, byte for byte, and the RFC's proof is accepted."""
    monkeypatch.setattr("agent.sasl.scram.secrets.token_urlsafe",
                        lambda n: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    cred = make_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    server = ScramServer("SCRAM-SHA-256", lambda u, m: cred if u == "user" else None)
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = server.step(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.done and server.principal == "user"


def _client_final(mech: str, password: str, first: bytes, cnonce: str,
                  user: str = "alice") -> tuple[bytes, bytes]:
    """An independent SCRAM client's final message (and the server signature it expects)."""
    h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mech]
    fields = dict(p.split("=", 1) for p in first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(h, password.encode(), base64.b64decode(fields["s"]),
                                 int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored = hashlib.new(h, client_key).digest()
    without = f"c=biws,r={fields['r']}"
    auth = f"n={user},r={cnonce},{first.decode()},{without}".encode()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored, auth, h).digest(),
                                        strict=True))
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return ((without + ",p=" + base64.b64encode(proof).decode()).encode(),
            b"v=" + base64.b64encode(hmac.new(server_key, auth, h).digest()))


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_accepts_the_password_only(mech: str) -> None:
    cred = make_credential(mech, "s3cret", 4096)
    assert b"s3cret" not in cred.stored_key + cred.server_key + cred.salt
    for password, ok in (("s3cret", True), ("wrong", False)):
        server = ScramServer(mech, lambda u, m: cred if (u, m) == ("alice", mech) else None)
        first = server.step(b"n,,n=alice,r=abc")
        final, signature = _client_final(mech, password, first, "abc")
        if ok:
            assert server.step(final) == signature and server.principal == "alice"
        else:
            with pytest.raises(AuthenticationFailed, match="invalid client credentials"):
                server.step(final)


@pytest.mark.parametrize(("first", "why"), [
    (b"n,,n=bob,r=abc", "no SCRAM-SHA-256 credential"),
    (b"n,a=bob,n=alice,r=abc", "authorization id"),
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens"),
    (b"y,,n=alice,r=abc", "invalid SCRAM client-first"),
    (b"p=tls-unique,,n=alice,r=abc", "invalid SCRAM client-first"),
    (b"\xff\xfe", "not UTF-8"),
    (b"n,,n=al=ice,r=abc", "username encoding"),
])
def test_scram_refuses_bad_first_messages(first: bytes, why: str) -> None:
    cred = make_credential("SCRAM-SHA-256", "pw", 4096)
    server = ScramServer("SCRAM-SHA-256", lambda u, m: cred if u == "alice" else None)
    with pytest.raises(AuthenticationFailed, match=why):
        server.step(first)


def test_scram_refuses_a_tampered_final_message() -> None:
    cred = make_credential("SCRAM-SHA-256", "pw", 4096)
    tampers: list[Callable[[bytes], bytes]] = [
        lambda f: f.replace(b"c=biws", b"c=eSws"),  # channel binding "y,,"
        lambda f: f.replace(b"r=abc", b"r=abd"),  # another nonce
        lambda f: f[:-4] + b"!!!="]  # not base64
    for tamper in tampers:
        server = ScramServer("SCRAM-SHA-256", lambda u, m: cred)
        final, _ = _client_final("SCRAM-SHA-256", "pw", server.step(b"n,,n=alice,r=abc"),
                                 "abc")
        with pytest.raises(AuthenticationFailed):
            server.step(tamper(final))


def test_credential_bounds() -> None:
    with pytest.raises(UnacceptableCredential, match="Too few iterations"):
        make_credential("SCRAM-SHA-512", "pw", 4095)
    with pytest.raises(UnacceptableCredential, match="Too many iterations"):
        make_credential("SCRAM-SHA-512", "pw", 16385)


def test_plain_checks_the_scram_credentials() -> None:
    creds = {"alice": [make_credential("SCRAM-SHA-512", "pw", 4096)]}

    def login(token: bytes) -> str:
        server = PlainServer(lambda u: creds.get(u, []))
        assert server.step(token) == b"" and server.done
        return server.principal

    assert login(b"\0alice\0pw") == "alice"
    assert login(b"alice\0alice\0pw") == "alice"
    for bad in (b"\0alice\0nope", b"\0bob\0pw", b"bob\0alice\0pw", b"\0alice\0", b"alice\0pw",
                b"\0\0pw"):
        with pytest.raises(AuthenticationFailed):
            login(bad)


class _Users:
    """A metadata store's SCRAM reads, in memory."""

    def __init__(self, creds: dict[str, list[ScramCredential]]) -> None:
        self.creds = creds

    def scram_credentials(self, user: str) -> list[ScramCredential]:
        return self.creds.get(user, [])


def _service(now: list[float], **settings: object) -> SaslService:
    config = AgentConfig(sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-512", **settings)  # type: ignore[arg-type]
    users = _Users({"alice": [make_credential("SCRAM-SHA-512", "pw", 4096)]})
    return SaslService(config, users, clock=lambda: now[0])  # type: ignore[arg-type]


def test_authenticator_gates_requests_until_authenticated() -> None:
    now = [100.0]
    auth = Authenticator(_service(now, connections_max_reauth_ms=60_000), "10.0.0.1", now[0])
    assert auth.refusal(18, now[0]) is None and auth.refusal(17, now[0]) is None
    assert "during SASL handshake" in (auth.refusal(3, now[0]) or "")
    assert "during SASL handshake" in (auth.refusal(36, now[0]) or "")
    auth.versions_answered = True  # one ApiVersions only, as Kafka's HANDSHAKE_REQUEST
    assert "a second one" in (auth.refusal(18, now[0]) or "")
    assert not auth.handshake("GSSAPI", 1) and auth.close_after_reply == "sasl_failed"
    auth = Authenticator(_service(now, connections_max_reauth_ms=60_000), "10.0.0.1", now[0])
    assert auth.handshake("PLAIN", 1) and auth.state == AUTHENTICATE
    # Mid-exchange: not refused unanswered, but ILLEGAL_SASL_STATE (Kafka's handleSaslToken)
    assert auth.refusal(3, now[0]) is None and auth.refusal(17, now[0]) is None
    assert "during SASL authentication" in (auth.illegal(3) or "")
    assert auth.illegal(17) and auth.illegal(18) and auth.illegal(36) is None
    outcome, delay = auth.authenticate(b"\0alice\0pw")
    assert outcome.error is None and outcome.lifetime_ms == 60_000 and delay == 0
    assert auth.state == COMPLETE and auth.principal == "User:alice"
    assert auth.refusal(3, now[0]) is None
    now[0] += 61  # past connections.max.reauth.ms: only a new handshake is served
    assert "expired" in (auth.refusal(3, now[0]) or "")
    assert auth.refusal(17, now[0]) is None
    assert auth.handshake("PLAIN", 1)
    assert "during SASL re-authentication" in (auth.illegal(3) or "")
    outcome, _ = auth.authenticate(b"\0alice\0pw")
    assert outcome.error is None and auth.refusal(3, now[0]) is None  # renewed
    raw = Authenticator(_service(now), "10.0.0.1", now[0])
    assert raw.handshake("PLAIN", 0) and raw.illegal(3) is None  # v0: every frame a token


def test_reauthentication_keeps_principal_and_mechanism() -> None:
    now = [0.0]
    service = _service(now)
    service.metadata.creds["bob"] = [make_credential("SCRAM-SHA-512", "pw2", 4096)]  # type: ignore[attr-defined]
    auth = Authenticator(service, "10.0.0.1", 0)
    auth.handshake("PLAIN", 1)
    auth.authenticate(b"\0alice\0pw")
    auth.handshake("PLAIN", 1)
    outcome, _ = auth.authenticate(b"\0bob\0pw2")
    assert outcome.error is not None and auth.close_after_reply
    auth = Authenticator(service, "10.0.0.1", 0)
    auth.handshake("PLAIN", 1)
    auth.authenticate(b"\0alice\0pw")
    auth.handshake("SCRAM-SHA-512", 1)
    outcome, _ = auth.authenticate(b"n,,n=alice,r=abc")
    assert outcome.error is not None and auth.close_after_reply


def test_failed_logins_are_paced_per_address() -> None:
    now = [0.0]
    service = _service(now, connection_failed_authentication_delay_ms=100)
    delays = []
    for _ in range(9):
        auth = Authenticator(service, "10.0.0.9", now[0])
        auth.handshake("PLAIN", 1)
        outcome, delay = auth.authenticate(b"\0alice\0wrong")
        assert outcome.error == ("Authentication failed during authentication due to invalid"
                                 " credentials with SASL mechanism PLAIN")
        delays.append(delay)
    assert delays == [0.1 * 2 ** min(i, 6) for i in range(9)]
    other = Authenticator(service, "10.0.0.10", now[0])  # another address: not slowed
    other.handshake("PLAIN", 1)
    assert other.authenticate(b"\0alice\0wrong")[1] == 0.1
    now[0] += 61  # a quiet minute: back to the base delay
    auth = Authenticator(service, "10.0.0.9", now[0])
    auth.handshake("PLAIN", 1)
    assert auth.authenticate(b"\0alice\0wrong")[1] == 0.1


# ------------------------------------------------------------------ OAUTHBEARER

def _jwks(tmp_path: Path) -> tuple[Any, Path]:
    """A signing key made here and its JWKS file."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}))
    return key, path


def _token(key: Any, **claims: Any) -> str:
    now = int(time.time())
    body = {"sub": "svc-orders", "iss": "https://idp.example", "aud": "kafka",
            "iat": now, "exp": now + 300, "scope": "produce consume", **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key,
                      algorithm="RS256", headers={"kid": "k1"})


def _message(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_validates_the_jwt(tmp_path: Path) -> None:
    key, path = _jwks(tmp_path)
    keys = Keys(OAuthSettings(str(path), "https://idp.example", ("kafka",)))
    server = OAuthBearerServer(keys)
    assert server.step(_message(_token(key))) == b"" and server.done
    assert server.principal == "svc-orders" and 290_000 < (server.lifetime_ms or 0) <= 300_000
    (tmp_path / "other").mkdir()
    other, _ = _jwks(tmp_path / "other")
    now = int(time.time())
    for bad, why in [(_token(key, exp=now - 100), "expired"),
                     (_token(key, nbf=now + 100), "not yet valid"),
                     (_token(key, iss="https://evil"), "(?i)issuer"),
                     (_token(key, aud="other"), "(?i)audience"),
                     (_token(key, exp=None), "exp"),
                     (_token(key, sub=None), "'sub'"),
                     (_token(key, scope=7), "'scope'"),
                     (_token(other), "Signature"),
                     (jwt.encode({"sub": "x", "exp": now + 60}, "s" * 32, algorithm="HS256",
                                 headers={"kid": "k1"}), "alg value is not allowed")]:
        server = OAuthBearerServer(keys)
        assert server.step(_message(bad)) == b'{"status": "invalid_token"}'
        with pytest.raises(AuthenticationFailed, match=why):
            server.step(b"\x01")
    for garbage in (b"n,,auth=Bearer x", b"\xff" * 40, b"n,,\x01auth=Basic abc\x01\x01"):
        with pytest.raises(AuthenticationFailed):
            OAuthBearerServer(keys).step(garbage)


def test_oauthbearer_session_lasts_as_long_as_the_token(tmp_path: Path) -> None:
    key, path = _jwks(tmp_path)
    now = [0.0]
    config = AgentConfig(sasl_enabled_mechanisms="OAUTHBEARER",
                         sasl_oauthbearer_jwks_endpoint_url=f"file://{path}",
                         connections_max_reauth_ms=3_600_000)
    service = SaslService(config, _Users({}), clock=lambda: now[0])  # type: ignore[arg-type]
    auth = Authenticator(service, "10.0.0.1", 0)
    assert auth.handshake("OAUTHBEARER", 1)
    outcome, _ = auth.authenticate(_message(_token(key, iss=None, aud=None)))
    assert outcome.error is None and auth.principal == "User:svc-orders"
    assert 290_000 < outcome.lifetime_ms <= 300_000  # the token's, shorter than reauth's
