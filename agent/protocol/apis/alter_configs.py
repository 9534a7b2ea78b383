"""AlterConfigs (key 33, the legacy API): each resource's configs replaced whole, as Kafka's
legacyAlterConfigs does: a TOPIC's overrides become exactly those given (any other is
removed, back to its default), and so do a BROKER's dynamic configs (its id, or "" for the
cluster-wide default: `metadata.brokerconfig`) and a GROUP's (`metadata.groupconfig`; both
stored and described, not applied); validated as IncrementalAlterConfigs validates them,
one transaction, nothing changed on an error; validate_only changes nothing. The checks
Kafka's broker makes first (a resource named twice, a key given twice, a null value, an
unknown type) and the dispatch are IncrementalAlterConfigs' (`configs.alter_all`). Other
resource types are refused. ALTER_CONFIGS is needed as for IncrementalAlterConfigs.
"""

from __future__ import annotations

from kio.schema.alter_configs import v0, v1, v2
from kio.static.primitive import i8
from kio.static.protocol import Entity, RequestHeader

from acl import Operation
from metadata.topicconfig import AlterOp

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from .configs import Alteration, alter_all, config_refusal

Request = v0.AlterConfigsRequest | v1.AlterConfigsRequest | v2.AlterConfigsRequest
"""kio's AlterConfigsRequest of each version served (0-2)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    alterations = [Alteration(int(r.resource_type), r.resource_name, tuple(
        (c.name, AlterOp.SET, c.value) for c in r.configs)) for r in request.resources]
    refused = [config_refusal(ctx, Operation.ALTER_CONFIGS, a.resource_type, a.name)
               for a in alterations]
    results = await ctx.run(alter_all, ctx, alterations, refused,
                            bool(request.validate_only), True)
    return b("AlterConfigsResponse", throttle_time=NO_THROTTLE, responses=tuple(
        b("AlterConfigsResourceResponse", error_code=error, error_message=message,
          resource_type=i8(a.resource_type), resource_name=a.name)
        for a, (error, message) in zip(alterations, results, strict=True)))
