"""What DescribeConfigs, AlterConfigs and IncrementalAlterConfigs share: Kafka's resource
types, config sources and types, which broker (agent) a BROKER resource names, who may
describe or alter a resource's configs, and THE checks and dispatch of an alteration
(`alter_all`: the legacy and the incremental API differ only in how they read a request
and whether a resource's set is replaced)."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

import acl
from metadata.topicconfig import AlterOp, ConfigChange
from metadata.topics import validate_topic_name

from ..context import ServerContext
from ..errors import failed


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids (the ones siltstream answers for)."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


# Kafka's ConfigResource.Type ids: TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP.
KNOWN_TYPES = frozenset({2, 4, 8, 16, 32})


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


# Kafka's ConfigDef.Type as DescribeConfigs v3+ numbers it.
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
                "LIST": 7, "CLASS": 8, "PASSWORD": 9}

Outcome = tuple[ErrorCode, str | None]
"""A resource's answer: its error code and message."""


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


def node_id(ctx: ServerContext) -> int | None:
    """This agent's broker id (None before it registered)."""
    info = None if ctx.registration is None else ctx.registration.info
    return None if info is None else info.node_id


def broker_error(ctx: ServerContext, name: str, *, describe: bool) -> str | None:
    """Why a BROKER resource `name` is not this agent's (None: it is), in the words of
    Kafka's ConfigHelper (`describe`) or ConfigAdminManager: the broker's own id, or the
    empty name (the cluster-wide default)."""
    if name == "":
        return None
    try:
        wanted = int(name)
    except ValueError:
        return f"{'Broker' if describe else 'Node'} id must be an integer, but it is: {name}"
    me = node_id(ctx)
    if wanted == me:
        return None
    either = " or empty string" if describe else ""
    return f"Unexpected broker id, expected {me}{either}, but received {name}"


@dataclass(frozen=True, slots=True)
class Alteration:
    """One resource of an AlterConfigs or IncrementalAlterConfigs request: Kafka's resource
    type id, its name, and its changes as (name, AlterOp id, value) (the legacy API's are
    all SET)."""

    resource_type: int
    name: str
    changes: tuple[tuple[str, int, str | None], ...]


def _topic(ctx: ServerContext, name: str, changes: list[ConfigChange], validate_only: bool,
           replace: bool) -> Outcome:
    what = f"altering the configs of topic {name!r}"
    try:
        validate_topic_name(name)
        ctx.metadata.alter_topic_configs(name, changes, validate_only=validate_only,
                                         replace=replace)
    except Exception as exc:  # InvalidTopicError first: Kafka's controller checks names
        return failed(what, exc)
    if not validate_only:
        ctx.agent.forget_topics()
    return ErrorCode.none, None


def _broker(ctx: ServerContext, name: str, changes: list[ConfigChange], validate_only: bool,
            replace: bool) -> Outcome:
    problem = broker_error(ctx, name, describe=False)
    if problem is not None:
        return ErrorCode.invalid_request, problem
    me = node_id(ctx)
    try:
        ctx.metadata.alter_broker_configs(-1 if me is None else me, name != "", changes,
                                          replace=replace, validate_only=validate_only)
    except Exception as exc:
        return failed(f"altering the dynamic configs of broker {name!r}", exc)
    return ErrorCode.none, None


def _group(ctx: ServerContext, name: str, changes: list[ConfigChange], validate_only: bool,
           replace: bool) -> Outcome:
    if not name:
        return ErrorCode.invalid_request, "Group name must not be empty"
    try:
        ctx.metadata.alter_group_configs(name, changes, replace=replace,
                                         validate_only=validate_only)
    except Exception as exc:
        return failed(f"altering the configs of group {name!r}", exc)
    return ErrorCode.none, None


def _alter(ctx: ServerContext, a: Alteration, denied: Outcome | None, twice: bool,
           validate_only: bool, replace: bool) -> Outcome:
    """One resource's answer: Kafka's ConfigAdminManager.preprocess (a resource named
    twice, a key given twice, a null value, an unknown type), then authorization, then the
    change itself (a topic's, a broker's or a group's; other types are refused)."""
    if twice:
        return ErrorCode.invalid_request, "Each resource must appear at most once."
    if any(n > 1 for n in Counter(name for name, _, _ in a.changes).values()):
        return ErrorCode.invalid_request, "Error due to duplicate config keys"
    nulls = [name for name, op, value in a.changes if value is None and op != AlterOp.DELETE]
    if nulls:
        return ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}"
    if a.resource_type not in KNOWN_TYPES:
        return ErrorCode.invalid_request, f"Unknown resource type {a.resource_type}"
    if denied is not None:
        return denied
    try:
        changes = [ConfigChange(name, AlterOp(op), value) for name, op, value in a.changes]
    except ValueError:
        bad = next(op for _, op, _ in a.changes if op not in {o.value for o in AlterOp})
        return ErrorCode.invalid_request, f"Unknown operations type {bad}"
    if a.resource_type == ResourceType.TOPIC:
        return _topic(ctx, a.name, changes, validate_only, replace)
    if a.resource_type == ResourceType.BROKER:
        return _broker(ctx, a.name, changes, validate_only, replace)
    if a.resource_type == ResourceType.GROUP:
        return _group(ctx, a.name, changes, validate_only, replace)
    return ErrorCode.invalid_request, f"resource type {a.resource_type} is not supported"


def alter_all(ctx: ServerContext, alterations: Sequence[Alteration],
              refused: Sequence[Outcome | None], validate_only: bool, replace: bool
              ) -> list[Outcome]:
    """Each resource's answer, in order (blocking: runs in the pool); those `refused` (no
    ALTER_CONFIGS) answer its error, unchanged. `replace`: a resource's configs become
    exactly those given (the legacy AlterConfigs), else each change applies to them."""
    named = Counter((a.resource_type, a.name) for a in alterations)
    return [_alter(ctx, a, denied, named[(a.resource_type, a.name)] > 1, validate_only,
                   replace) for a, denied in zip(alterations, refused, strict=True)]


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
