"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer serves
them, and the credentials they check, kept as Kafka keeps them (ScramFormatter): salt,
iterations, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"), SaltedPassword = PBKDF2-HMAC(password, salt, iterations).
Neither key reveals the password: the server checks a client's proof against StoredKey and
signs its answer with ServerKey.

The exchange (no channel binding, as Kafka: the gs2 header must be "n"):
  client-first  n,[a=authzid],n=user,r=cnonce[,ext=value...]
  server-first  r=cnonce+snonce,s=base64(salt),i=iterations
  client-final  c=base64(gs2 header),r=...cnonce+snonce,p=base64(ClientProof)
  server-final  v=base64(ServerSignature)
An unknown user, an authzid other than the user, delegation-token authentication
(tokenauth=true: not served), a nonce or channel binding that does not match, a wrong proof:
AuthenticationFailed (the client is told only that its credentials are invalid).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from metadata.models import ScramCredential

from .errors import AuthenticationFailed, UnacceptableCredential, UnsupportedMechanism


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism: its name, Kafka's type code (AlterUserScramCredentials), hash."""

    name: str
    type: int
    hash: str
    min_iterations: int = 4096


SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS = {m.name: m for m in (SHA_256, SHA_512)}
BY_TYPE = {m.type: m for m in (SHA_256, SHA_512)}
MAX_ITERATIONS = 16384  # Kafka's ScramControlManager.MAX_ITERATIONS
DEFAULT_ITERATIONS = 8192


def mechanism(name: str) -> ScramMechanism:
    """The SCRAM mechanism called `name`; UnsupportedMechanism otherwise."""
    try:
        return MECHANISMS[name]
    except KeyError:
        raise UnsupportedMechanism(f"unknown SCRAM mechanism {name!r}") from None


def check_iterations(mech: ScramMechanism, iterations: int) -> None:
    """Kafka's bounds (ScramControlManager.validateUpsertion): UnacceptableCredential."""
    if iterations < mech.min_iterations:
        raise UnacceptableCredential("Too few iterations")
    if iterations > MAX_ITERATIONS:
        raise UnacceptableCredential("Too many iterations")


def salted_password(mech: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(mech.hash, password, salt, iterations)


def _hmac(mech: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mech.hash).digest()


def from_salted_password(mech: ScramMechanism, salted: bytes, salt: bytes,
                         iterations: int) -> ScramCredential:
    """The credential of a salted password (what AlterUserScramCredentials sends)."""
    client_key = _hmac(mech, salted, b"Client Key")
    return ScramCredential(mech.name, salt, hashlib.new(mech.hash, client_key).digest(),
                           _hmac(mech, salted, b"Server Key"), iterations)


def make_credential(name: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential for `password` (a random 32-byte salt unless given)."""
    mech = mechanism(name)
    check_iterations(mech, iterations)
    salt = secrets.token_bytes(32) if salt is None else salt
    return from_salted_password(mech, salted_password(mech, password.encode(), salt,
                                                       iterations), salt, iterations)


def verify_password(credential: ScramCredential, password: bytes) -> bool:
    """Whether `password` is the one `credential` was made from (PLAIN's check)."""
    mech = mechanism(credential.mechanism)
    salted = salted_password(mech, password, credential.salt, credential.iterations)
    stored = hashlib.new(mech.hash, _hmac(mech, salted, b"Client Key")).digest()
    return hmac.compare_digest(stored, credential.stored_key)


# RFC 5802's messages, as Kafka's ScramMessages parses them.
_VALUE = r"[^,]*"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_EXTENSIONS = r"(?P<extensions>(?:,[A-Za-z]+=[^,]*)*)"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_VALUE}))?,)n=(?P<user>{_VALUE}),r=(?P<nonce>{_PRINTABLE})"
    + _EXTENSIONS)
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>[A-Za-z0-9+/]*=*),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},"
    r"p=(?P<proof>[A-Za-z0-9+/]+=*)")


def _sasl_name(text: str) -> str:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "=", any other "=" is invalid."""
    if re.search(r"=(?!2C|3D)", text):
        raise AuthenticationFailed("invalid username encoding")
    return text.replace("=2C", ",").replace("=3D", "=")


Lookup = Callable[[str, str], ScramCredential | None]
"""(user, mechanism) -> the user's credential, or None."""


class ScramServer:
    """One SCRAM exchange, server side: `step` twice, then `principal` (the user name)."""

    def __init__(self, name: str, lookup: Lookup) -> None:
        self.mech = mechanism(name)
        self.lookup = lookup
        self.user = ""
        self.done = False
        self._state = 0
        self._first_bare = self._server_first = self._gs2 = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    @property
    def principal(self) -> str:
        return self.user

    def step(self, token: bytes) -> bytes:
        """The reply to the client's next message; AuthenticationFailed if it fails."""
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("a SCRAM message that is not UTF-8") from None
        if self._state == 0:
            return self._client_first(text)
        if self._state == 1:
            return self._client_final(text)
        raise AuthenticationFailed("the SCRAM exchange is over")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise AuthenticationFailed("invalid SCRAM client-first message")
        user = _sasl_name(m["user"])
        authzid = m["authzid"]
        if authzid and _sasl_name(authzid) != user:
            raise AuthenticationFailed("the authorization id is not the user name")
        extensions = dict(part.split("=", 1) for part in m["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise AuthenticationFailed("delegation tokens are not served")
        credential = self.lookup(user, self.mech.name)
        if credential is None:
            raise AuthenticationFailed(f"no {self.mech.name} credential for user {user!r}")
        if credential.iterations < self.mech.min_iterations:
            raise AuthenticationFailed("the stored credential has too few iterations")
        self.user, self._credential, self._gs2 = user, credential, m["gs2"]
        self._first_bare = text[len(m["gs2"]):]
        self._nonce = m["nonce"] + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()}"
                              f",i={credential.iterations}")
        self._state = 1
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.fullmatch(text)
        credential = self._credential
        if m is None or credential is None:
            raise AuthenticationFailed("invalid SCRAM client-final message")
        # Kafka's test: the nonce ENDS with the server-first one (librdkafka before 1.9 sent
        # the client nonce twice; its proof, over the message as sent, is still checked).
        if not m["nonce"].endswith(self._nonce):
            raise AuthenticationFailed("invalid client nonce in the final client message")
        try:
            channel = base64.b64decode(m["channel"], validate=True)
            proof = base64.b64decode(m["proof"], validate=True)
        except binascii.Error:
            raise AuthenticationFailed("invalid base64 in the final client message") from None
        if channel != self._gs2.encode():
            raise AuthenticationFailed("invalid channel binding")
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.mech, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self.mech.hash, client_key).digest(),
                                   credential.stored_key):
            raise AuthenticationFailed("invalid client credentials")
        self._state, self.done = 2, True
        server_signature = _hmac(self.mech, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
