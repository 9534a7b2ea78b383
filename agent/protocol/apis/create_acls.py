"""CreateAcls (key 30): store ACL bindings (Kafka's AclApis.handleCreateAcls). Checks in
Kafka's order: ALTER on the CLUSTER (else every creation CLUSTER_AUTHORIZATION_FAILED), an
authorizer configured (else SECURITY_DISABLED), then each binding (INVALID_REQUEST: an
UNKNOWN or ANY field, an empty name, a CLUSTER name other than kafka-cluster); the valid
ones are stored in one transaction (metadata/acls.py), a binding already stored kept once.
This agent's authorizer is reloaded before the answer, other agents' within a second."""

from __future__ import annotations

from kio.schema.create_acls import v1, v2, v3
from kio.schema.create_acls.v1.request import AclCreation as V1
from kio.schema.create_acls.v2.request import AclCreation as V2
from kio.schema.create_acls.v3.request import AclCreation as V3
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import (
    CLUSTER_NAME,
    Acl,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_new,
    from_code,
)

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed

Request = v1.CreateAclsRequest | v2.CreateAclsRequest | v3.CreateAclsRequest
"""kio's CreateAclsRequest of each version served (1-3; Kafka 4.0 removed v0)."""

NOT_AUTHORIZED = "Request is not authorized: ALTER on the CLUSTER resource is needed."
NO_AUTHORIZER = "No Authorizer is configured."


def binding(creation: V1 | V2 | V3) -> Acl:
    """The binding a creation asks for (unknown codes read as UNKNOWN)."""
    return Acl(from_code(ResourceType, creation.resource_type), creation.resource_name,
               from_code(PatternType, creation.resource_pattern_type), creation.principal,
               creation.host, from_code(Operation, creation.operation),
               from_code(Permission, creation.permission_type))


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    def answer(results: list[tuple[ErrorCode, str | None]]) -> Entity:
        return b("CreateAclsResponse", throttle_time=NO_THROTTLE, results=tuple(
            b("AclCreationResult", error_code=code, error_message=message)
            for code, message in results))

    n = len(request.creations)
    if not ctx.authz.allows(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return answer([(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)] * n)
    if not ctx.authz.enabled:
        return answer([(ErrorCode.security_disabled, NO_AUTHORIZER)] * n)
    results: list[tuple[ErrorCode, str | None]] = []
    valid: list[Acl] = []
    for creation in request.creations:
        acl = binding(creation)
        try:
            check_new(acl)
        except InvalidAclError as exc:
            results.append((ErrorCode.invalid_request, str(exc)))
            continue
        valid.append(acl)
        results.append((ErrorCode.none, None))
    if valid:
        try:
            await ctx.run(ctx.metadata.create_acls, valid)
            await ctx.run(ctx.authz.load, ctx.metadata)
        except Exception as exc:
            error = failed("CreateAcls", exc)
            results = [error if code == ErrorCode.none else (code, message)
                       for code, message in results]
    return answer(results)
