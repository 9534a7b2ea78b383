"""Who is on the other end of a connection: the session every handler may consult.

A connection's task sets `SESSION` when it starts (the listener it came in on, the client's
address) and again once the client has authenticated (its principal). Kafka's principal is
"type:name"; an unauthenticated connection on a PLAINTEXT listener is `User:ANONYMOUS`, as
Kafka's DefaultKafkaPrincipalBuilder names it. Authorization reads the session; nothing
else writes it.
"""

from __future__ import annotations

import contextvars
import dataclasses
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True)
class Session:
    """One connection's identity: principal, client host, listener and its protocol."""

    principal: str = ANONYMOUS
    host: str = ""
    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"

    def with_principal(self, principal: str) -> Session:
        """This session once its client authenticated as `principal`."""
        return dataclasses.replace(self, principal=principal)


# The default is frozen, so sharing it between connections is safe.
SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar(
    "session", default=Session())  # noqa: B039
