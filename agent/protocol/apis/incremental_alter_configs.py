"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT on a topic's configs
(`MetadataStore.alter_topic_configs`: Kafka's semantics, APPEND/SUBTRACT for list-typed
configs such as cleanup.policy, the result validated as CreateTopics validates configs);
validate_only changes nothing. A bad value or key gets INVALID_CONFIG with a message (so does
adding `compact` to a topic holding records without key hashes: see
`MetadataStore.alter_topic_configs`), an unknown topic UNKNOWN_TOPIC_OR_PARTITION (an
illegal name INVALID_TOPIC_EXCEPTION: Kafka's controller checks Topic.validate), an
unknown operation or a key named twice INVALID_REQUEST; a change the metadata store did not
make REQUEST_TIMED_OUT (not applied: retry) or UNKNOWN_SERVER_ERROR
(`errors.ADMIN`). BROKER resources: the agent's settings are static (file,
environment, flags), so every change gets what Kafka answers for configs it cannot update
dynamically (INVALID_REQUEST, "Cannot update these configs dynamically").
ALTER_CONFIGS is needed on the topic, on the cluster for a BROKER resource (else that
resource is TOPIC_ or CLUSTER_AUTHORIZATION_FAILED, unchanged).
"""

from __future__ import annotations

from collections import Counter

from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs import v0, v1
from kio.static.protocol import Entity, RequestHeader

from acl import Operation
from metadata.errors import InvalidTopicError
from metadata.topicconfig import AlterOp, ConfigChange
from metadata.topics import validate_topic_name

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed
from .configs import ResourceType, broker_error, config_refusal

Request = (v0.IncrementalAlterConfigsRequest | v1.IncrementalAlterConfigsRequest)
"""kio's IncrementalAlterConfigsRequest of each version served (0-1)."""
Resource = (v0.request.AlterConfigsResource | v1.request.AlterConfigsResource)


Outcome = tuple[ErrorCode, str | None]


def _topic(ctx: ServerContext, resource: Resource, validate_only: bool) -> Outcome:
    what = f"altering the configs of topic {resource.resource_name!r}"
    try:
        validate_topic_name(resource.resource_name)
    except InvalidTopicError as exc:
        return failed(what, exc)
    changes = []
    for c in resource.configs:
        try:
            op = AlterOp(int(c.config_operation))
        except ValueError:
            return ErrorCode.invalid_request, f"unknown config operation {c.config_operation}"
        changes.append(ConfigChange(c.name, op, c.value))
    try:
        ctx.metadata.alter_topic_configs(resource.resource_name, changes,
                                         validate_only=validate_only)
    except Exception as exc:
        return failed(what, exc)
    if not validate_only:
        ctx.agent.forget_topics()
    return ErrorCode.none, None


def broker_refusal(ctx: ServerContext, name: str, keys: list[str]) -> Outcome:
    """The answer to changing BROKER resource `name`'s `keys` (legacy AlterConfigs too)."""
    problem = broker_error(ctx, name)
    if problem is None:
        names = ", ".join(sorted(keys))
        problem = (f"Invalid config value for resource BROKER {name!r}:"
                   f" Cannot update these configs dynamically: {names} (agent settings"
                   " come from the settings file, SILT_* variables and flags)")
    return ErrorCode.invalid_request, problem


def alter_all(ctx: ServerContext, request: Request, refused: list[Outcome | None]
              ) -> list[tuple[Resource, Outcome]]:
    """Alter each resource (blocking: runs in the pool); those `refused` (no ALTER_CONFIGS)
    answer its error, unaltered."""
    out: list[tuple[Resource, Outcome]] = []
    resources: list[Resource] = list(request.resources)
    for r, denied in zip(resources, refused, strict=True):
        twice = [k for k, n in Counter(c.name for c in r.configs).items() if n > 1]
        if denied is not None:
            outcome: Outcome = denied
        elif twice:
            outcome = (ErrorCode.invalid_request,
                       f"duplicate config keys: {', '.join(sorted(twice))}")
        elif int(r.resource_type) == ResourceType.TOPIC:
            outcome = _topic(ctx, r, bool(request.validate_only))
        elif int(r.resource_type) == ResourceType.BROKER:
            outcome = broker_refusal(ctx, r.resource_name, [c.name for c in r.configs])
        else:
            outcome = (ErrorCode.invalid_request,
                       f"resource type {r.resource_type} is not supported")
        out.append((r, outcome))
    return out


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    refused = [config_refusal(ctx, Operation.ALTER_CONFIGS, int(r.resource_type), r.resource_name)
               for r in request.resources]
    results = await ctx.run(alter_all, ctx, request, refused)
    return b("IncrementalAlterConfigsResponse", throttle_time=NO_THROTTLE, responses=tuple(
        b("AlterConfigsResourceResponse", error_code=error, error_message=message,
          resource_type=r.resource_type, resource_name=r.resource_name)
        for r, (error, message) in results))
