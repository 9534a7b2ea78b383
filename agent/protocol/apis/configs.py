"""What DescribeConfigs and IncrementalAlterConfigs share: Kafka's resource types, config
sources and types, which broker (agent) a BROKER resource names, and who may describe or
alter a resource's configs."""

from __future__ import annotations

import enum

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

import acl

from ..context import ServerContext


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids (the ones siltstream answers for)."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


# Kafka's ConfigDef.Type as DescribeConfigs v3+ numbers it.
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
                "LIST": 7, "CLASS": 8, "PASSWORD": 9}


# Kafka's ConfigResource.Type ids decided on the cluster: BROKER, BROKER_LOGGER, CLIENT_METRICS.
_ON_CLUSTER = frozenset({4, 8, 16})
_DENIED = {acl.ResourceType.CLUSTER: (ErrorCode.cluster_authorization_failed,
                                      "Cluster authorization failed."),
           acl.ResourceType.TOPIC: (ErrorCode.topic_authorization_failed,
                                    "Topic authorization failed."),
           acl.ResourceType.GROUP: (ErrorCode.group_authorization_failed,
                                    "Group authorization failed.")}


def config_refusal(ctx: ServerContext, op: acl.Operation, resource_type: int, name: str
            ) -> tuple[ErrorCode, str] | None:
    """Why the client may not do `op` (DESCRIBE_CONFIGS, ALTER_CONFIGS) on a config resource,
    None if it may (or the type is one the handlers refuse anyway): a BROKER (or broker
    logger, client metrics) resource is decided on the CLUSTER, a TOPIC or GROUP on itself,
    with KafkaApis' error and words for each."""
    if resource_type in _ON_CLUSTER:
        rtype, rname = acl.ResourceType.CLUSTER, acl.CLUSTER_NAME
    elif resource_type == ResourceType.TOPIC:
        rtype, rname = acl.ResourceType.TOPIC, name
    elif resource_type == ResourceType.GROUP:
        rtype, rname = acl.ResourceType.GROUP, name
    else:
        return None
    return None if ctx.authz.allows(op, rtype, rname) else _DENIED[rtype]


def config_type(name: str) -> i8:
    return i8(CONFIG_TYPES.get(name, 0))


def broker_error(ctx: ServerContext, name: str) -> str | None:
    """Why a BROKER resource `name` is not this agent's (None: it is). As Kafka: the broker's
    own id, or the empty name (cluster-wide defaults, which are this agent's settings)."""
    me = None if ctx.registration is None or ctx.registration.info is None else str(
        ctx.registration.info.node_id)
    if name in ("", me):
        return None
    return f"unexpected broker id, expected {me} or empty string, but received {name!r}"


# Kafka's broker config for each setting that means the same thing here (DescribeConfigs of a
# BROKER resource lists it under Kafka's name, the setting's own key as its synonym).
KAFKA_BROKER_NAMES: dict[str, str] = {
    "agent.listeners": "listeners",
    "agent.advertised.listeners": "advertised.listeners",
    "agent.listener.security.protocol.map": "listener.security.protocol.map",
    "agent.ssl.client.auth": "ssl.client.auth",
    "agent.ssl.principal.mapping.rules": "ssl.principal.mapping.rules",
    "agent.socket.request.max.bytes": "socket.request.max.bytes",
    "agent.queued.max.request.bytes": "queued.max.request.bytes",
    "agent.connections.max.idle.ms": "connections.max.idle.ms",
    "agent.max.connections.total": "max.connections",
    "agent.max.connections.per.ip": "max.connections.per.ip",
    "agent.fetch.max.bytes": "fetch.max.bytes",
    "agent.quota.window.num": "quota.window.num",
    "agent.quota.window.size.seconds": "quota.window.size.seconds",
    "agent.auto.create.topics.enable": "auto.create.topics.enable",
    "agent.num.partitions": "num.partitions",
    "agent.group.min.session.timeout.ms": "group.min.session.timeout.ms",
    "agent.group.max.session.timeout.ms": "group.max.session.timeout.ms",
    "agent.group.initial.rebalance.delay.ms": "group.initial.rebalance.delay.ms",
    "agent.offset.metadata.max.bytes": "offset.metadata.max.bytes",
    "agent.transaction.max.timeout.ms": "transaction.max.timeout.ms",
    "agent.transaction.abort.timed.out.transaction.cleanup.interval.ms":
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "agent.sasl.enabled.mechanisms": "sasl.enabled.mechanisms",
    "agent.sasl.server.max.receive.size": "sasl.server.max.receive.size",
    "agent.connections.max.reauth.ms": "connections.max.reauth.ms",
    "agent.connection.failed.authentication.delay.ms":
        "connection.failed.authentication.delay.ms",
    **{f"agent.sasl.oauthbearer.{n}": f"sasl.oauthbearer.{n}" for n in (
        "jwks.endpoint.url", "expected.issuer", "expected.audience", "sub.claim.name",
        "scope.claim.name", "clock.skew.seconds", "jwks.endpoint.refresh.ms")},
    "agent.authorizer.class.name": "authorizer.class.name",
    "agent.super.users": "super.users",
    "agent.allow.everyone.if.no.acl.found": "allow.everyone.if.no.acl.found",
    "metadata.offsets.retention.minutes": "offsets.retention.minutes",
    "metadata.offsets.retention.check.interval.ms": "offsets.retention.check.interval.ms",
    "metadata.producer.id.expiration.ms": "producer.id.expiration.ms",
    "metadata.producer.id.expiration.check.interval.ms":
        "producer.id.expiration.check.interval.ms",
    "metadata.broker.session.timeout.ms": "broker.session.timeout.ms",
    "metadata.broker.heartbeat.interval.ms": "broker.heartbeat.interval.ms",
}

# Kafka's broker config holding each topic config's cluster default (its
# ServerTopicConfigSynonyms, the first of each): a BROKER resource lists it at the topic
# config's default here, which no setting changes.
TOPIC_DEFAULT_NAMES: dict[str, str] = {
    "segment.bytes": "log.segment.bytes", "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms", "segment.index.bytes": "log.index.size.max.bytes",
    "flush.messages": "log.flush.interval.messages", "flush.ms": "log.flush.interval.ms",
    "retention.bytes": "log.retention.bytes", "retention.ms": "log.retention.ms",
    "max.message.bytes": "message.max.bytes", "index.interval.bytes": "log.index.interval.bytes",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "cleanup.policy": "log.cleanup.policy",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "min.insync.replicas": "min.insync.replicas", "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level", "preallocate": "log.preallocate",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "local.retention.ms": "log.local.retention.ms",
    "local.retention.bytes": "log.local.retention.bytes",
}
