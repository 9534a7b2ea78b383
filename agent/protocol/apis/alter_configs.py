"""AlterConfigs (key 33, the legacy API): each resource's configs replaced whole, as Kafka's
legacyAlterConfigs does: a TOPIC's overrides become exactly those given (any other is
removed, back to its default; a null value removes that one), through the same topic-config
code as IncrementalAlterConfigs (`MetadataStore.alter_topic_configs(replace=True)`:
validated as CreateTopics validates, one transaction, nothing changed on an error);
validate_only changes nothing. A key given twice keeps its last value (Kafka builds a map);
a resource named twice is INVALID_REQUEST "Duplicate resource." and changes nothing of it;
a resource type Kafka does not know UNSUPPORTED_VERSION. BROKER resources are refused as
IncrementalAlterConfigs refuses them (the agent's settings are static), and so are the
other known types.
ALTER_CONFIGS is needed as for IncrementalAlterConfigs.
"""

from __future__ import annotations

from collections import Counter

from kio.schema.alter_configs import v0, v1, v2
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import Operation
from metadata.errors import InvalidTopicError
from metadata.topicconfig import AlterOp, ConfigChange
from metadata.topics import validate_topic_name

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed
from .configs import ResourceType, config_refusal
from .incremental_alter_configs import Outcome, broker_refusal

Request = v0.AlterConfigsRequest | v1.AlterConfigsRequest | v2.AlterConfigsRequest
"""kio's AlterConfigsRequest of each version served (0-2)."""
Resource = (v0.request.AlterConfigsResource | v1.request.AlterConfigsResource
            | v2.request.AlterConfigsResource)

# Kafka's ConfigResource.Type ids: TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP.
KNOWN_TYPES = frozenset({2, 4, 8, 16, 32})


def _topic(ctx: ServerContext, resource: Resource, validate_only: bool) -> Outcome:
    what = f"replacing the configs of topic {resource.resource_name!r}"
    try:
        validate_topic_name(resource.resource_name)
    except InvalidTopicError as exc:
        return failed(what, exc)
    given = {c.name: c.value for c in resource.configs}  # the last of a key given twice
    changes = [ConfigChange(key, AlterOp.DELETE) if value is None
               else ConfigChange(key, AlterOp.SET, value) for key, value in given.items()]
    try:
        ctx.metadata.alter_topic_configs(resource.resource_name, changes,
                                         validate_only=validate_only, replace=True)
    except Exception as exc:
        return failed(what, exc)
    if not validate_only:
        ctx.agent.forget_topics()
    return ErrorCode.none, None


def alter_all(ctx: ServerContext, request: Request, refused: list[Outcome | None]
              ) -> list[tuple[Resource, Outcome]]:
    """Replace each resource's configs (blocking: runs in the pool); those `refused` (no
    ALTER_CONFIGS) answer its error, unchanged."""
    named = Counter((int(r.resource_type), r.resource_name) for r in request.resources)
    answered: set[tuple[int, str]] = set()
    out: list[tuple[Resource, Outcome]] = []
    resources: list[Resource] = list(request.resources)
    for r, denied in zip(resources, refused, strict=True):
        key = (int(r.resource_type), r.resource_name)
        if key[0] not in KNOWN_TYPES:
            outcome: Outcome = (ErrorCode.unsupported_version,
                                f"Unknown resource type {key[0]}.")
        elif named[key] > 1:
            if key in answered:
                continue
            answered.add(key)
            outcome = ErrorCode.invalid_request, "Duplicate resource."
        elif denied is not None:
            outcome = denied
        elif key[0] == ResourceType.TOPIC:
            outcome = _topic(ctx, r, bool(request.validate_only))
        elif key[0] == ResourceType.BROKER:
            outcome = broker_refusal(ctx, r.resource_name, [c.name for c in r.configs])
        else:
            outcome = (ErrorCode.invalid_request,
                       f"resource type {r.resource_type} is not supported")
        out.append((r, outcome))
    return out


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    refused: list[Outcome | None] = [
        config_refusal(ctx, Operation.ALTER_CONFIGS, int(r.resource_type), r.resource_name)
        for r in request.resources]
    results = await ctx.run(alter_all, ctx, request, refused)
    return b("AlterConfigsResponse", throttle_time=NO_THROTTLE, responses=tuple(
        b("AlterConfigsResourceResponse", error_code=error, error_message=message,
          resource_type=r.resource_type, resource_name=r.resource_name)
        for r, (error, message) in results))
