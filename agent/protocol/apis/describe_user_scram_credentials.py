"""DescribeUserScramCredentials (key 50): each user's SCRAM mechanisms and iterations (never
a salt or key), as Kafka's ScramImage.describe answers: no users named lists every user; a
user named twice is DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND. Needs
DESCRIBE on the CLUSTER (else CLUSTER_AUTHORIZATION_FAILED for the whole request)."""

from __future__ import annotations

from collections import Counter

from kio.schema.describe_user_scram_credentials import v0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from agent.sasl.scram import MECHANISMS

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = v0.DescribeUserScramCredentialsRequest
"""kio's DescribeUserScramCredentialsRequest of each version served (0)."""

DUPLICATE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
MISSING = "Attempt to describe a user credential that does not exist: "


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return b("DescribeUserScramCredentialsResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.cluster_authorization_failed, error_message=None,
                 results=())
    users = await ctx.run(ctx.metadata.scram_users)
    asked = [u.name for u in request.users or ()]
    counts = Counter(asked)
    results = []
    for user in dict.fromkeys(asked) if asked else users:
        if counts[user] > 1:
            results.append(b("DescribeUserScramCredentialsResult", user=user,
                             error_code=ErrorCode.duplicate_resource,
                             error_message=DUPLICATE + user, credential_infos=()))
        elif user not in users:
            results.append(b("DescribeUserScramCredentialsResult", user=user,
                             error_code=ErrorCode.resource_not_found,
                             error_message=MISSING + user, credential_infos=()))
        else:
            results.append(b("DescribeUserScramCredentialsResult", user=user,
                             error_code=ErrorCode.none, error_message=None,
                             credential_infos=tuple(
                                 b("CredentialInfo", mechanism=i8(MECHANISMS[m].type),
                                   iterations=i32(i)) for m, i in users[user])))
    return b("DescribeUserScramCredentialsResponse", throttle_time=NO_THROTTLE,
             error_code=ErrorCode.none, error_message=None, results=tuple(results))
