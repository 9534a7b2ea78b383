"""AlterClientQuotas (key 49): set or remove each entity's quotas
(`MetadataStore.alter_client_quotas`, one transaction; validate_only stores nothing), each
entity answered on its own as Kafka's ClientQuotaControlManager answers it: INVALID_REQUEST
with Kafka's words for an empty or mixed entity, an unknown type, a key named twice, an
entity named twice, an unknown key, a value not above 0, a fractional byte rate. Keys:
producer_byte_rate and consumer_byte_rate (enforced by every agent: agent/quotas.py),
request_percentage and controller_mutation_rate (stored and described, not enforced here),
connection_creation_rate for ip entities (likewise).
ALTER_CONFIGS on the cluster is needed (else every entry CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.alter_client_quotas import v0, v1
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from metadata.errors import InvalidQuotaError
from metadata.quotas import Alteration, entity_of
from metadata.quotas import Entity as QuotaEntity

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed

Request = v0.AlterClientQuotasRequest | v1.AlterClientQuotasRequest
"""kio's AlterClientQuotasRequest of each version served (0-1)."""
Entry = v0.request.EntryData | v1.request.EntryData

Outcome = tuple[ErrorCode, str | None]


def _shown(entity: QuotaEntity) -> str:
    """An entity as Kafka's ClientQuotaEntity.toString shows it."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{k}={n}" for k, n in entity) + "})"


def _alteration(entry: Entry) -> Alteration:
    entity = entity_of([(e.entity_type, e.entity_name) for e in entry.entity])
    changes: dict[str, float | None] = {}
    for op in entry.ops:
        if op.key in changes:
            raise InvalidQuotaError(f"Duplicate quota key {op.key} not updating quota for"
                                    f" this entity {_shown(entity)}")
        changes[op.key] = None if op.remove else float(op.value)
    return entity, changes


def alter_all(ctx: ServerContext, request: Request) -> list[Outcome]:
    """Each entry's outcome (blocking: runs in the pool)."""
    outcomes: list[Outcome | None] = []
    wanted: list[tuple[int, Alteration]] = []
    seen: set[QuotaEntity] = set()
    entries: Sequence[Entry] = request.entries
    for i, entry in enumerate(entries):
        try:
            alteration = _alteration(entry)
        except InvalidQuotaError as exc:
            outcomes.append((ErrorCode.invalid_request, str(exc)))
            continue
        if alteration[0] in seen:
            outcomes.append((ErrorCode.invalid_request,
                             f"Ignoring duplicate entity {_shown(alteration[0])}"))
            continue
        seen.add(alteration[0])
        outcomes.append(None)
        wanted.append((i, alteration))
    try:
        results = ctx.metadata.alter_client_quotas([a for _, a in wanted],
                                                   validate_only=bool(request.validate_only))
    except Exception as exc:
        error = failed("altering client quotas", exc)
        return [error if o is None else o for o in outcomes]
    for (i, _), problem in zip(wanted, results, strict=True):
        outcomes[i] = ((ErrorCode.none, None) if problem is None
                       else (ErrorCode.invalid_request, str(problem)))
    return [o if o is not None else (ErrorCode.none, None) for o in outcomes]


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    entries: Sequence[Entry] = request.entries
    if not ctx.authz.allows(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        outcomes: list[tuple[ErrorCode, str | None]] = [
            (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
        ] * len(entries)
    else:
        outcomes = await ctx.run(alter_all, ctx, request)
    if any(code is ErrorCode.none for code, _ in outcomes) and not request.validate_only:
        await ctx.run(ctx.refresh_quotas)  # in force here before the answer (others: 1 s)
    return b("AlterClientQuotasResponse", throttle_time=NO_THROTTLE, entries=tuple(
        b("EntryData", error_code=code, error_message=message, entity=tuple(
            b("EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity))
        for entry, (code, message) in zip(entries, outcomes, strict=True)))
