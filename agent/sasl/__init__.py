"""SASL mechanisms the agent's SASL listeners serve, as pure server-side exchanges:
PLAIN (plain.py) and SCRAM-SHA-256/512 (scram.py, RFC 5802/7677) against SCRAM credentials
(salt, iterations, stored key, server key: never a password), OAUTHBEARER (oauth.py).
Each exchange is a `Mechanism`: `step(token) -> reply` until `done`, then `principal`;
a failure raises `errors.AuthenticationFailed`. Credential lookups are injected (the
metadata store's, in agent/protocol/authenticator.py)."""

from metadata.models import ScramCredential

from .errors import AuthenticationFailed, UnacceptableCredential
from .scram import MECHANISMS, make_credential

__all__ = ["MECHANISMS", "AuthenticationFailed", "ScramCredential", "UnacceptableCredential",
           "make_credential"]
