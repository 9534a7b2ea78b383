"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND and SUBTRACT on a resource's
configs (`configs.alter_all`, shared with the legacy AlterConfigs); validate_only changes
nothing. First the checks Kafka's broker makes of a request (ConfigAdminManager.preprocess:
a resource named twice, a key given twice, a null value of SET/APPEND/SUBTRACT, an unknown
resource type or operation: INVALID_REQUEST), then:

- TOPIC: `MetadataStore.alter_topic_configs` (Kafka's semantics, APPEND/SUBTRACT for
  list-typed configs such as cleanup.policy, the result validated as CreateTopics validates
  configs). A bad value or key gets INVALID_CONFIG with a message (so does adding `compact`
  to a topic holding records without key hashes), an unknown topic
  UNKNOWN_TOPIC_OR_PARTITION (an illegal name INVALID_TOPIC_EXCEPTION: Kafka's controller
  checks Topic.validate).
- BROKER (this agent's id, or "" for the cluster-wide default): Kafka's dynamic broker
  configs (`metadata.brokerconfig`: `sasl.kerberos.min.time.before.relogin`,
  `background.threads`, `log.cleanup.policy`, ...), checked as Kafka's DynamicBrokerConfig
  checks them (a config it cannot update dynamically, such as silt's own settings, is
  INVALID_REQUEST "Cannot update these configs dynamically"), stored in the metadata store
  and described by DescribeConfigs, not applied: the agent runs on its settings.
- GROUP (any group id): Kafka 4.0's group configs (`metadata.groupconfig`:
  `consumer.session.timeout.ms`, ...), checked as Kafka's GroupConfig (INVALID_CONFIG),
  stored and described, not applied (they govern consumer-protocol and share groups).
- Other types: INVALID_REQUEST.

A change the metadata store did not make is REQUEST_TIMED_OUT (not applied: retry) or
UNKNOWN_SERVER_ERROR (`errors.ADMIN`). ALTER_CONFIGS is needed on the topic, on the cluster
for a BROKER resource (else that resource is TOPIC_ or CLUSTER_AUTHORIZATION_FAILED,
unchanged).
"""

from __future__ import annotations

from kio.schema.incremental_alter_configs import v0, v1
from kio.static.primitive import i8
from kio.static.protocol import Entity, RequestHeader

from acl import Operation

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from .configs import Alteration, alter_all, config_refusal

Request = (v0.IncrementalAlterConfigsRequest | v1.IncrementalAlterConfigsRequest)
"""kio's IncrementalAlterConfigsRequest of each version served (0-1)."""


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    alterations = [Alteration(int(r.resource_type), r.resource_name, tuple(
        (c.name, int(c.config_operation), c.value) for c in r.configs))
        for r in request.resources]
    refused = [config_refusal(ctx, Operation.ALTER_CONFIGS, a.resource_type, a.name)
               for a in alterations]
    results = await ctx.run(alter_all, ctx, alterations, refused,
                            bool(request.validate_only), False)
    return b("IncrementalAlterConfigsResponse", throttle_time=NO_THROTTLE, responses=tuple(
        b("AlterConfigsResourceResponse", error_code=error, error_message=message,
          resource_type=i8(a.resource_type), resource_name=a.name)
        for a, (error, message) in zip(alterations, results, strict=True)))
