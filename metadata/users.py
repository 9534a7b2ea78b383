"""The user database of the SASL listeners: SCRAM credentials per user and mechanism
(AlterUserScramCredentials, DescribeUserScramCredentials, `silt users`; SCRAM and PLAIN
logins read them). A password is never stored, only what Kafka stores (models.
ScramCredential).

A change is one write transaction: a crash before COMMIT changes nothing, after it the
whole request's deletions and upsertions are in. Logins read the credential when they
happen, so a changed or deleted credential applies to the next login on every agent (a
session already authenticated lasts until connections.max.reauth.ms, as in Kafka).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from . import schema as s
from .engine import Database
from .models import ScramCredential


def _credential(row: Any) -> ScramCredential:
    return ScramCredential(row.mechanism, bytes(row.salt), bytes(row.stored_key),
                           bytes(row.server_key), int(row.iterations))


def scram_credentials(db: Database, user: str) -> list[ScramCredential]:
    """Every SCRAM credential of `user` (none: an unknown user)."""
    c = s.scram_credentials.c
    with db.read() as conn:
        rows = conn.execute(sa.select(s.scram_credentials).where(c.user_name == user)
                            .order_by(c.mechanism)).all()
    return [_credential(r) for r in rows]


def scram_users(db: Database) -> dict[str, list[tuple[str, int]]]:
    """Every user with a credential: user -> [(mechanism, iterations)], by name."""
    c = s.scram_credentials.c
    with db.read() as conn:
        rows = conn.execute(sa.select(c.user_name, c.mechanism, c.iterations)
                            .order_by(c.user_name, c.mechanism)).all()
    out: dict[str, list[tuple[str, int]]] = {}
    for row in rows:
        out.setdefault(row.user_name, []).append((row.mechanism, int(row.iterations)))
    return out


def alter_scram_credentials(db: Database, deletions: Sequence[tuple[str, str]],
                            upsertions: Sequence[tuple[str, ScramCredential]]) -> set[str]:
    """Delete (user, mechanism) credentials and insert or replace others, in one
    transaction; the users one of whose deletions found no credential are returned and
    nothing of theirs is changed (Kafka's RESOURCE_NOT_FOUND, per user)."""
    c = s.scram_credentials.c
    now = db.clock.now_ms()
    with db.write() as conn:
        missing = {user for user, mechanism in deletions
                   if conn.execute(sa.select(c.user_name).where(
                       c.user_name == user, c.mechanism == mechanism)).first() is None}
        for user, mechanism in deletions:
            if user not in missing:
                conn.execute(s.scram_credentials.delete().where(c.user_name == user,
                                                                c.mechanism == mechanism))
        for user, cred in upsertions:
            if user in missing:
                continue
            conn.execute(s.scram_credentials.delete().where(c.user_name == user,
                                                            c.mechanism == cred.mechanism))
            conn.execute(s.scram_credentials.insert().values(
                user_name=user, mechanism=cred.mechanism, salt=cred.salt,
                stored_key=cred.stored_key, server_key=cred.server_key,
                iterations=cred.iterations, updated_at_ms=now))
    return missing
