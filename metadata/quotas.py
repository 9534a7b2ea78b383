"""Client quotas (Kafka's DescribeClientQuotas and AlterClientQuotas): stored rows, and the
checks Kafka's ClientQuotaControlManager makes before it stores an alteration.

An entity is its (type, name) pairs sorted by type, a name None for the type's default
(Kafka's `<default>`); it is stored as the JSON of that list. Types: `user` and
`client-id` (alone or together, the byte-rate and request keys) or `ip` alone
(`connection_creation_rate`). An alteration of several entities is one write transaction,
each entity's changes checked first: one that fails is answered with its error and changes
nothing of it, the others are stored (as Kafka's controller answers per entity). A crash
before COMMIT changes nothing.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from . import schema as s
from .engine import Database
from .errors import InvalidQuotaError

USER, CLIENT_ID, IP = "user", "client-id", "ip"
Entity = tuple[tuple[str, str | None], ...]
"""A quota entity: (type, name or None for the default) pairs, sorted by type."""

# Kafka's QuotaConfig keys by entity kind: is each integral (LONG/INT) or a DOUBLE.
USER_CLIENT_KEYS: Mapping[str, bool] = {"producer_byte_rate": True,
                                        "consumer_byte_rate": True,
                                        "request_percentage": False,
                                        "controller_mutation_rate": False}
IP_KEYS: Mapping[str, bool] = {"connection_creation_rate": True}


def entity_of(pairs: Sequence[tuple[str, str | None]]) -> Entity:
    """The entity of these (type, name) pairs, checked as Kafka's validateEntity and
    configKeysForEntityType check one (InvalidQuotaError with Kafka's words)."""
    if not pairs:
        raise InvalidQuotaError("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in seen:
            raise InvalidQuotaError(
                f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in (USER, CLIENT_ID, IP):
            raise InvalidQuotaError(f"Unhandled client quota entity type: {kind}")
        seen[kind] = name
    if IP in seen:
        if len(seen) > 1:
            raise InvalidQuotaError("Invalid quota entity combination, IP entity should"
                                    "not be combined with User or ClientId")
        name = seen[IP]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                raise InvalidQuotaError(
                    f"{name} is not a valid IP or resolvable host.") from None
    return tuple(sorted(seen.items()))


def keys_of(entity: Entity) -> Mapping[str, bool]:
    """The quota keys an entity may have (whether each is integral)."""
    return IP_KEYS if entity[0][0] == IP else USER_CLIENT_KEYS


def check_value(entity: Entity, key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue (InvalidQuotaError with its words)."""
    integral = keys_of(entity).get(key)
    if integral is None:
        raise InvalidQuotaError(f"Invalid configuration key {key}")
    if not value > 0.0:
        raise InvalidQuotaError(f"Quota {key} must be greater than 0")
    if integral and (value > 2**63 - 1 or math.isinf(value)):
        raise InvalidQuotaError(f"Proposed value for {key} is too large for a LONG.")
    if integral and abs(math.fmod(value, 1.0)) > 1e-6:
        raise InvalidQuotaError(f"{key} cannot be a fractional value.")


def _key(entity: Entity) -> str:
    return json.dumps([list(pair) for pair in entity])


def _entity(text: str) -> Entity:
    return tuple((str(kind), name) for kind, name in json.loads(text))


def client_quotas(db: Database) -> dict[Entity, dict[str, float]]:
    """Every entity's quotas (one read)."""
    q = s.client_quotas.c
    out: dict[Entity, dict[str, float]] = {}
    with db.read() as conn:
        for row in conn.execute(sa.select(q.entity, q.quota_key, q.value)):
            out.setdefault(_entity(row.entity), {})[row.quota_key] = float(row.value)
    return out


Alteration = tuple[Entity, Mapping[str, float | None]]
"""An entity and its changes: a key to a new value, or to None to remove it."""


def alter_client_quotas(db: Database, alterations: Sequence[Alteration], *,
                        validate_only: bool = False) -> list[InvalidQuotaError | None]:
    """Check each entity's changes (`check_value`) and store those that pass, in one
    transaction (none with `validate_only`); per alteration, its error or None."""
    checked: list[InvalidQuotaError | None] = []
    for entity, changes in alterations:
        try:
            for key, value in changes.items():
                if value is not None:
                    check_value(entity, key, value)
            checked.append(None)
        except InvalidQuotaError as exc:
            checked.append(exc)
    if validate_only or all(e is not None for e in checked):
        return checked
    q = s.client_quotas.c
    with db.write() as conn:
        for (entity, changes), error in zip(alterations, checked, strict=True):
            if error is not None:
                continue
            key = _key(entity)
            for quota_key, value in changes.items():
                conn.execute(s.client_quotas.delete().where(q.entity == key,
                                                            q.quota_key == quota_key))
                if value is not None:
                    conn.execute(s.client_quotas.insert().values(
                        entity=key, quota_key=quota_key, value=value))
    return checked
