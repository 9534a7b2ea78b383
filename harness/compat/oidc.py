"""The OIDC token endpoint librdkafka's 0126_oauthbearer_oidc expects of a cluster, as
trivup's OauthbearerOIDCApp provides it: `/retrieve` answers a valid token (client
credentials with one of trivup's scopes, a JWT-bearer assertion signed by the client's key,
or an Azure IMDS GET with its api-version, resource and client_id), `/retrieve/expire` one
already expired, `/retrieve/badformat` one whose signature is broken. Its tokens are signed
by a key made at run time, whose JWKS the agent trusts; the runner learns the endpoint and
the client's key files from trivup's variables (VALID_OIDC_URL, ...)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from harness.agent_process import free_port

from .tls import Fixtures

ISSUER, AUDIENCE = "silt-compat-oidc", "kafka"
CLIENT_ID, CLIENT_SECRET = "123", "abc"
PASSWORD = "silt-compat-oidc-key"
_SCOPES = ("test", "test-scope", "api://1234-abcd/.default")  # trivup's VALID_SCOPE
_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_LIFETIME_S = 4  # trivup's: short, so that the clients refresh (and re-authenticate)
_KID = "silt-compat"
_IMDS = ("api-version", "resource", "client_id")


class Endpoint(ThreadingHTTPServer):
    """The token endpoint, served by a thread of the harness on 127.0.0.1."""

    daemon_threads = True

    def __init__(self, signing: rsa.RSAPrivateKey, client: rsa.RSAPublicKey) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.signing, self.client = signing, client
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/retrieve"

    def token(self, sub: str, client_id: str, lifetime_s: int) -> str:
        now = int(time.time())
        return jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "client_id": client_id,
                           "iat": now, "exp": now + lifetime_s, "scope": "test"},
                          self.signing, algorithm="RS256", headers={"kid": _KID})

    def grant(self, form: dict[str, str], basic_auth: bool) -> str | None:
        """The subject a token request's form is granted a token for, else None."""
        if form.get("scope", "test") not in _SCOPES:
            return None
        if form.get("grant_type") == "client_credentials" and basic_auth:
            return "subject"
        if form.get("grant_type") == _JWT_BEARER:
            try:
                claims = jwt.decode(form.get("assertion", ""), self.client,
                                    algorithms=["RS256"], options={"verify_aud": False})
            except jwt.InvalidTokenError:
                return None
            return str(claims.get("sub", "")) or None
        return None


class _Handler(BaseHTTPRequestHandler):
    server: Endpoint

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        form = {k: v[0] for k, v in parse_qs(body).items()}
        path = urlsplit(self.path).path
        if path == "/retrieve":
            sub = self.server.grant(
                form, self.headers.get("Authorization", "").startswith("Basic "))
            if sub is None:
                self._answer(400, {"error": "invalid_grant"})
            else:
                self._answer(200, {"access_token": self.server.token(
                    sub, CLIENT_ID, _LIFETIME_S)})
        elif path == "/retrieve/expire":
            self._answer(200, {"access_token": self.server.token("subject", CLIENT_ID, -60)})
        elif path == "/retrieve/badformat":
            token = self.server.token("subject", CLIENT_ID, 30)
            self._answer(200, {"access_token": token + "invalid"})
        else:
            self._answer(404, {"error": "not_found"})

    def do_GET(self) -> None:
        """Azure IMDS's token request (`Metadata: true`, the query naming the identity)."""
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path != "/retrieve" or self.headers.get("Metadata") != "true" \
                or not all(query.get(name) for name in _IMDS):
            self._answer(400, {"error": "invalid_request"})
            return
        self._answer(200, {"access_token": self.server.token(
            "subject", query["client_id"], _LIFETIME_S)})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the runner's log says what the clients got."""


def make(directory: Path) -> tuple[Endpoint, Fixtures]:
    """Start the endpoint; write the JWKS the agent trusts and the client's key files under
    `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    client = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing.public_key()))
    jwks = directory / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": _KID, "alg": "RS256", "use": "sig"}]}))
    pem, encrypted = directory / "client.key", directory / "client.encrypted.key"
    pkcs8 = serialization.PrivateFormat.PKCS8
    pem.write_bytes(client.private_bytes(serialization.Encoding.PEM, pkcs8,
                                         serialization.NoEncryption()))
    encrypted.write_bytes(client.private_bytes(
        serialization.Encoding.PEM, pkcs8,
        serialization.BestAvailableEncryption(PASSWORD.encode())))
    endpoint = Endpoint(signing, client.public_key())
    base = endpoint.url
    return endpoint, Fixtures(
        agent_env={"SILT_AGENT_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL": str(jwks),
                   "SILT_AGENT_SASL_OAUTHBEARER_EXPECTED_ISSUER": ISSUER,
                   "SILT_AGENT_SASL_OAUTHBEARER_EXPECTED_AUDIENCE": AUDIENCE},
        conf=(("sasl.oauthbearer.method", "oidc"),
              ("sasl.oauthbearer.client.id", CLIENT_ID),
              ("sasl.oauthbearer.client.secret", CLIENT_SECRET),
              ("sasl.oauthbearer.scope", "test"),
              ("sasl.oauthbearer.extensions",
               "ExtensionworkloadIdentity=develC348S,Extensioncluster=lkc123"),
              ("sasl.oauthbearer.token.endpoint.url", base)),
        runner_env={"VALID_OIDC_URL": base, "EXPIRED_TOKEN_OIDC_URL": f"{base}/expire",
                    "INVALID_OIDC_URL": f"{base}/badformat",
                    "OAUTHBEARER_CLIENT_PRIVATE_KEY": str(pem),
                    "OAUTHBEARER_CLIENT_PRIVATE_KEY_ENCRYPTED": str(encrypted),
                    "OAUTHBEARER_CLIENT_PRIVATE_KEY_PASSWORD": PASSWORD})
