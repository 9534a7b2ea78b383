"""DeleteAcls (key 31): delete the bindings each filter matches, all filters in one
transaction (Kafka's AclControlManager.deleteAcls is atomic too). ALTER on the CLUSTER is
needed (else every filter CLUSTER_AUTHORIZATION_FAILED), then an authorizer (else
SECURITY_DISABLED); a filter with an UNKNOWN field is INVALID_REQUEST and the others go
on. Each filter's answer lists the bindings it matched."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.delete_acls import v1, v2, v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Acl, AclFilter, InvalidAclError, Operation, ResourceType, check_filter

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed
from .create_acls import NO_AUTHORIZER, NOT_AUTHORIZED
from .describe_acls import acl_filter

Request = v1.DeleteAclsRequest | v2.DeleteAclsRequest | v3.DeleteAclsRequest
"""kio's DeleteAclsRequest of each version served (1-3; Kafka 4.0 removed v0)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    def result(code: ErrorCode, message: str | None, acls: Sequence[Acl] = ()) -> Entity:
        return b("DeleteAclsFilterResult", error_code=code, error_message=message,
                 matching_acls=tuple(
                     b("DeleteAclsMatchingAcl", error_code=ErrorCode.none, error_message=None,
                       resource_type=i8(int(acl.resource_type)), resource_name=acl.name,
                       pattern_type=i8(int(acl.pattern_type)), principal=acl.principal,
                       host=acl.host, operation=i8(int(acl.operation)),
                       permission_type=i8(int(acl.permission)))
                     for acl in acls))

    def answer(results: list[Entity]) -> Entity:
        return b("DeleteAclsResponse", throttle_time=NO_THROTTLE, filter_results=tuple(results))

    n = len(request.filters)
    if not ctx.authz.allows(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return answer([result(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)] * n)
    if not ctx.authz.enabled:
        return answer([result(ErrorCode.security_disabled, NO_AUTHORIZER)] * n)
    filters: list[AclFilter | InvalidAclError] = []
    for entry in request.filters:
        flt = acl_filter(entry)
        try:
            check_filter(flt)
            filters.append(flt)
        except InvalidAclError as exc:
            filters.append(exc)
    valid = [f for f in filters if isinstance(f, AclFilter)]
    try:
        matched = iter(await ctx.run(ctx.metadata.delete_acls, valid) if valid else [])
        await ctx.run(ctx.authz.load, ctx.metadata)
    except Exception as exc:
        code, message = failed("DeleteAcls", exc)
        return answer([result(ErrorCode.invalid_request, str(f)) if isinstance(f, Exception)
                       else result(code, message) for f in filters])
    return answer([result(ErrorCode.invalid_request, str(f)) if isinstance(f, Exception)
                   else result(ErrorCode.none, None, next(matched)) for f in filters])
