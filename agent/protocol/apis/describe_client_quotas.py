"""DescribeClientQuotas (key 48): the stored client quotas (`MetadataStore.client_quotas`)
whose entity matches the filter, as Kafka's ClientQuotasImage.describe matches: each
component an entity type that must be present with that name (EXACT), as the default
(DEFAULT) or with any name (SPECIFIED); `strict`: no other type either. A filter Kafka
refuses is the whole request's INVALID_REQUEST (an empty type, a type twice, a match string
where none belongs or none where one does, an ip component with user or client-id), an
unknown entity type UNSUPPORTED_VERSION, with Kafka's words.
DESCRIBE_CONFIGS on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kio.schema.describe_client_quotas import v0, v1
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from metadata.errors import InvalidQuotaError, UnsupportedQuotaEntityError
from metadata.quotas import CLIENT_ID, IP, USER
from metadata.quotas import Entity as QuotaEntity

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import error_code

Request = v0.DescribeClientQuotasRequest | v1.DescribeClientQuotasRequest
"""kio's DescribeClientQuotasRequest of each version served (0-1)."""

EXACT, DEFAULT, SPECIFIED = 0, 1, 2  # Kafka's match types


def parse_filter(request: Request) -> tuple[dict[str, str | None], set[str]]:
    """The filter's exact matches (type -> name, None: the default) and the types that must
    be present; InvalidQuotaError / UnsupportedQuotaEntityError as Kafka refuses one."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for c in request.components:
        kind = c.entity_type
        if not kind:
            raise InvalidQuotaError("Invalid empty entity type.")
        if kind in exact or kind in present:
            raise InvalidQuotaError(
                f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (IP, USER, CLIENT_ID):
            raise UnsupportedQuotaEntityError(f"Unsupported entity type {kind}")
        match = int(c.match_type)
        if match == EXACT:
            if c.match is None:
                raise InvalidQuotaError("Request specified MATCH_TYPE_EXACT, but set match"
                                        " string to null.")
            exact[kind] = c.match
        elif match in (DEFAULT, SPECIFIED):
            if c.match is not None:
                name = "MATCH_TYPE_DEFAULT" if match == DEFAULT else "MATCH_TYPE_SPECIFIED"
                raise InvalidQuotaError(f"Request specified {name}, but also specified a"
                                        " match string.")
            if match == DEFAULT:
                exact[kind] = None
            else:
                present.add(kind)
        else:
            raise InvalidQuotaError(f"Unknown match type {match}")
    named = set(exact) | present
    if IP in named and named & {USER, CLIENT_ID}:
        raise InvalidQuotaError("Invalid entity filter component combination. IP filter"
                                " component should not be used with user or clientId filter"
                                " component.")
    return exact, present


def matches(entity: QuotaEntity, exact: dict[str, str | None], present: set[str],
            strict: bool) -> bool:
    """Kafka's ClientQuotasImage.matches."""
    have = dict(entity)
    if strict and len(have) != len(exact) + len(present):
        return False
    return (all(k in have and have[k] == v for k, v in exact.items())
            and all(k in have for k in present))


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return b("DescribeClientQuotasResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.cluster_authorization_failed,
                 error_message="Cluster authorization failed.", entries=None)
    try:
        exact, present = parse_filter(request)
    except (InvalidQuotaError, UnsupportedQuotaEntityError) as exc:
        return b("DescribeClientQuotasResponse", throttle_time=NO_THROTTLE,
                 error_code=error_code(exc), error_message=str(exc), entries=None)
    quotas = await ctx.run(ctx.metadata.client_quotas)
    entries = tuple(
        b("EntryData", entity=tuple(b("EntityData", entity_type=k, entity_name=n)
                                    for k, n in entity),
          values=tuple(b("ValueData", key=key, value=f64(value))
                       for key, value in sorted(values.items())))
        for entity, values in sorted(quotas.items(), key=lambda e: repr(e[0]))
        if matches(entity, exact, present, bool(request.strict)))
    return b("DescribeClientQuotasResponse", throttle_time=NO_THROTTLE,
             error_code=ErrorCode.none, error_message=None, entries=entries)
