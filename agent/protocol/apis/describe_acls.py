"""DescribeAcls (key 29): the bindings a filter matches, from this agent's cached snapshot
(Kafka's AclApis.handleDescribeAcls answers from the broker's authorizer the same way).
DESCRIBE on the CLUSTER is needed (else CLUSTER_AUTHORIZATION_FAILED), then an authorizer
(else SECURITY_DISABLED); a filter with an UNKNOWN field is INVALID_REQUEST (Kafka refuses
it while parsing the request)."""

from __future__ import annotations

from kio.schema.delete_acls.v1 import request as delete_v1
from kio.schema.delete_acls.v2 import request as delete_v2
from kio.schema.delete_acls.v3 import request as delete_v3
from kio.schema.describe_acls import v1, v2, v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
from kio.static.protocol import Entity, RequestHeader

from acl import (
    CLUSTER_NAME,
    Acl,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_filter,
    from_code,
)

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = v1.DescribeAclsRequest | v2.DescribeAclsRequest | v3.DescribeAclsRequest
"""kio's DescribeAclsRequest of each version served (1-3; Kafka 4.0 removed v0)."""

NOT_AUTHORIZED_DESCRIBE = "Request is not authorized: DESCRIBE on the CLUSTER resource is needed."


Filter = (Request | delete_v1.DeleteAclsFilter | delete_v2.DeleteAclsFilter
          | delete_v3.DeleteAclsFilter)
"""A DescribeAcls request or one DeleteAcls filter: the same filter fields."""


def acl_filter(r: Filter) -> AclFilter:
    """The filter a request asks for (unknown codes read as UNKNOWN)."""
    return AclFilter(from_code(ResourceType, r.resource_type_filter), r.resource_name_filter,
                     from_code(PatternType, r.pattern_type_filter), r.principal_filter,
                     r.host_filter, from_code(Operation, r.operation),
                     from_code(Permission, r.permission_type))


def resources(b: Builder, acls: list[Acl]) -> tuple[Entity, ...]:
    """Bindings grouped by resource pattern (DescribeAclsResponse.aclsResources)."""
    by_pattern: dict[tuple[int, str, int], list[Acl]] = {}
    for acl in acls:
        key = (int(acl.resource_type), acl.name, int(acl.pattern_type))
        by_pattern.setdefault(key, []).append(acl)
    return tuple(
        b("DescribeAclsResource", resource_type=i8(rtype), resource_name=name,
          pattern_type=i8(pattern), acls=tuple(
              b("AclDescription", principal=acl.principal, host=acl.host,
                operation=i8(int(acl.operation)), permission_type=i8(int(acl.permission)))
              for acl in group))
        for (rtype, name, pattern), group in by_pattern.items())


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    def answer(code: ErrorCode, message: str | None, found: tuple[Entity, ...] = ()) -> Entity:
        return b("DescribeAclsResponse", throttle_time=NO_THROTTLE, error_code=code,
                 error_message=message, resources=found)

    if not ctx.authz.allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return answer(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED_DESCRIBE)
    if not ctx.authz.enabled:
        return answer(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    flt = acl_filter(request)
    try:
        check_filter(flt)
    except InvalidAclError as exc:
        return answer(ErrorCode.invalid_request, str(exc))
    return answer(ErrorCode.none, None, resources(b, ctx.authz.acls(flt)))
