"""AlterUserScramCredentials (key 51): delete and upsert SCRAM credentials, with Kafka's
checks and answers (ScramControlManager.alterCredentials): a user altered twice in one
request is DUPLICATE_RESOURCE, an unknown mechanism UNSUPPORTED_SASL_MECHANISM, an empty
name or iterations outside [4096, 16384] UNACCEPTABLE_CREDENTIAL, deleting a credential that
does not exist RESOURCE_NOT_FOUND; the rest is applied in one transaction. An upsertion
carries the salted password; only the stored and server keys derived from it are kept.
Needs ALTER on the CLUSTER (else CLUSTER_AUTHORIZATION_FAILED for every user)."""

from __future__ import annotations

from kio.schema.alter_user_scram_credentials import v0
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from agent.sasl.errors import UnacceptableCredential
from agent.sasl.scram import BY_TYPE, check_iterations, from_salted_password
from metadata import ScramCredential

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import error_code

Request = v0.AlterUserScramCredentialsRequest
"""kio's AlterUserScramCredentialsRequest of each version served (0)."""

TWICE = "A user credential cannot be altered twice in the same request"
MISSING = "Attempt to delete a user credential that does not exist"

Error = tuple[ErrorCode, str]


def _check(name: str, mechanism: int) -> Error | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in BY_TYPE:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    names = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not ctx.authz.allows(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return b("AlterUserScramCredentialsResponse", throttle_time=NO_THROTTLE, results=tuple(
            b("AlterUserScramCredentialsResult", user=name,
              error_code=ErrorCode.cluster_authorization_failed, error_message=None)
            for name in dict.fromkeys(names)))
    errors: dict[str, Error] = {}
    deletions: dict[str, tuple[str, str]] = {}
    upsertions: dict[str, tuple[str, ScramCredential]] = {}
    for d in request.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.duplicate_resource, TWICE)
        elif (error := _check(d.name, int(d.mechanism))) is not None:
            errors[d.name] = error
        else:
            deletions[d.name] = (d.name, BY_TYPE[int(d.mechanism)].name)
    for u in request.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.duplicate_resource, TWICE)
        elif (error := _check(u.name, int(u.mechanism))) is not None:
            errors[u.name] = error
        else:
            mech = BY_TYPE[int(u.mechanism)]
            try:
                check_iterations(mech, int(u.iterations))
            except UnacceptableCredential as exc:
                errors[u.name] = (error_code(exc), str(exc))
                continue
            upsertions[u.name] = (u.name, from_salted_password(
                mech, bytes(u.salted_password), bytes(u.salt), int(u.iterations)))
    missing = await ctx.run(ctx.metadata.alter_scram_credentials, list(deletions.values()),
                            list(upsertions.values()))
    for user in missing:
        errors[user] = (ErrorCode.resource_not_found, MISSING)
    done = [user for user in (*deletions, *upsertions) if user not in missing]
    return b("AlterUserScramCredentialsResponse", throttle_time=NO_THROTTLE, results=(
        *(b("AlterUserScramCredentialsResult", user=user, error_code=ErrorCode.none,
            error_message=None) for user in done),
        *(b("AlterUserScramCredentialsResult", user=user, error_code=code,
            error_message=message) for user, (code, message) in errors.items())))
