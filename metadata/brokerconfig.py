"""Kafka's dynamic broker configs (KIP-226): the broker configs AlterConfigs and
IncrementalAlterConfigs may set on a BROKER resource, per broker (its id) or as the
cluster-wide default (the empty name), checked as Kafka's broker checks them, and their
rows in the metadata store (`dynamic_configs`).

The names, types, defaults and checks are Kafka's (apache/kafka 1eb7644: DynamicBrokerConfig
.AllDynamicConfigs, DynamicConfig.Broker, ConfigAdminManager): the SSL keystore and
truststore configs only per listener (`listener.name.<listener>.<config>`), the listener,
SASL and connection-limit configs only per broker (except max.connections,
max.connection.creation.rate and num.network.threads), the topic configs' cluster defaults
(`log.retention.ms`, ...), the log cleaner's, the thread pools' (within half and double of
the current count), the replication quotas. Any other name is refused as Kafka refuses a
broker config it cannot update dynamically (names Kafka does not know too: Kafka stores
those for plugins, of which silt has none).

The values are STORED and DESCRIBED (DescribeConfigs: DYNAMIC_BROKER_CONFIG,
DYNAMIC_DEFAULT_BROKER_CONFIG), NOT APPLIED: an agent runs on its settings (file, SILT_*
variables, flags), and most of these configs name parts silt does not have (JVM keystores,
Kerberos, log cleaner threads, replica fetchers). Passwords are stored as given, as
KRaft's metadata log keeps them (DescribeConfigs never returns them).

A change replaces the resource's whole set in one write transaction (dynconfigs.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from settings import declared

from . import dynconfigs
from .engine import Database
from .errors import InvalidBrokerConfigError, InvalidConfigError
from .topicconfig import DEFAULTS, DESCRIPTIONS, AlterOp, ConfigChange, TopicConfig

BROKER = 4  # Kafka's ConfigResource.Type id of a BROKER resource (dynamic_configs.resource_type)
CLUSTER_DEFAULT = ""  # the resource name of the cluster-wide default

# Kafka's broker config holding each topic config's cluster default (ServerTopicConfigSynonyms
# .TOPIC_CONFIG_SYNONYMS, the first of each): all dynamic (DynamicLogConfig), checked as the
# topic config is.
TOPIC_DEFAULT_NAMES: Mapping[str, str] = {
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
_TOPIC_OF = {broker: topic for topic, broker in TOPIC_DEFAULT_NAMES.items()}

INT_MAX = 2_147_483_647
LONG_MAX = 9_223_372_036_854_775_807
_RANGES = {"INT": (-INT_MAX - 1, INT_MAX), "SHORT": (-32_768, 32_767),
           "LONG": (-LONG_MAX - 1, LONG_MAX)}


@dataclass(frozen=True, slots=True)
class Def:
    """One dynamic broker config: its Kafka type (ConfigDef.Type name), default as
    DescribeConfigs shows it (None: null), and range or choices (ConfigDef validators)."""

    kind: str
    default: str | None
    lo: float | None = None
    hi: float | None = None
    options: tuple[str, ...] = ()


def _d(kind: str, default: str | None, lo: float | None = None, hi: float | None = None,
       options: tuple[str, ...] = ()) -> Def:
    return Def(kind, default, lo, hi, options)


_LONG_MAX, _INT_MAX = str(LONG_MAX), str(INT_MAX)

# SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only per listener (DynamicSecurityConfigs).
SECURITY: Mapping[str, Def] = {
    "ssl.keystore.type": _d("STRING", "JKS"), "ssl.keystore.location": _d("STRING", None),
    "ssl.keystore.password": _d("PASSWORD", None), "ssl.key.password": _d("PASSWORD", None),
    "ssl.truststore.type": _d("STRING", "JKS"), "ssl.truststore.location": _d("STRING", None),
    "ssl.truststore.password": _d("PASSWORD", None),
    "ssl.keystore.certificate.chain": _d("PASSWORD", None),
    "ssl.keystore.key": _d("PASSWORD", None),
    "ssl.truststore.certificates": _d("PASSWORD", None),
}
# DynamicListenerConfig.ReconfigurableConfigs (with the SSL ones above), then SocketServer's.
LISTENER: Mapping[str, Def] = {
    "advertised.listeners": _d("STRING", None),
    "listeners": _d("STRING", "PLAINTEXT://:9092"),
    "listener.security.protocol.map": _d(
        "STRING", "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
    "principal.builder.class": _d(
        "CLASS", "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"),
    "ssl.protocol": _d("STRING", "TLSv1.3"), "ssl.provider": _d("STRING", None),
    "ssl.cipher.suites": _d("LIST", None),
    "ssl.enabled.protocols": _d("LIST", "TLSv1.2,TLSv1.3"),
    "ssl.keymanager.algorithm": _d("STRING", "SunX509"),
    "ssl.trustmanager.algorithm": _d("STRING", "PKIX"),
    "ssl.endpoint.identification.algorithm": _d("STRING", "https"),
    "ssl.secure.random.implementation": _d("STRING", None),
    "ssl.client.auth": _d("STRING", "none", options=("required", "requested", "none")),
    "ssl.engine.factory.class": _d("CLASS", None),
    "sasl.mechanism.inter.broker.protocol": _d("STRING", "GSSAPI"),
    "sasl.jaas.config": _d("PASSWORD", None),
    "sasl.enabled.mechanisms": _d("LIST", "GSSAPI"),
    "sasl.kerberos.service.name": _d("STRING", None),
    "sasl.kerberos.kinit.cmd": _d("STRING", "/usr/bin/kinit"),
    "sasl.kerberos.ticket.renew.window.factor": _d("DOUBLE", "0.8"),
    "sasl.kerberos.ticket.renew.jitter": _d("DOUBLE", "0.05"),
    "sasl.kerberos.min.time.before.relogin": _d("LONG", "60000"),
    "sasl.kerberos.principal.to.local.rules": _d("LIST", "DEFAULT"),
    "sasl.login.refresh.window.factor": _d("DOUBLE", "0.8", 0.5, 1.0),
    "sasl.login.refresh.window.jitter": _d("DOUBLE", "0.05", 0.0, 0.25),
    "sasl.login.refresh.min.period.seconds": _d("SHORT", "60", 0, 900),
    "sasl.login.refresh.buffer.seconds": _d("SHORT", "300", 0, 3600),
    "max.connections": _d("INT", _INT_MAX, 0),
    "max.connection.creation.rate": _d("INT", _INT_MAX, 0),
    "num.network.threads": _d("INT", "3", 1),
    "max.connections.per.ip": _d("INT", _INT_MAX, 0),
    "max.connections.per.ip.overrides": _d("STRING", ""),
}
# The thread pools (DynamicThreadPool): a new count within half and double of the current.
THREADS: Mapping[str, Def] = {
    "num.io.threads": _d("INT", "8", 1), "num.replica.fetchers": _d("INT", "1"),
    "num.recovery.threads.per.data.dir": _d("INT", "1", 1),
    "background.threads": _d("INT", "10", 1),
}
# LogCleaner's, the metric reporters, the producer state's, the remote log's
# (DynamicRemoteLogConfig) and the replication quotas (DynamicConfig.Broker's QuotaConfig).
OTHERS: Mapping[str, Def] = {
    "log.cleaner.threads": _d("INT", "1", 0),
    "log.cleaner.dedupe.buffer.size": _d("LONG", "134217728"),
    "log.cleaner.io.buffer.load.factor": _d("DOUBLE", "0.9"),
    "log.cleaner.io.buffer.size": _d("INT", "524288", 0),
    "log.cleaner.io.max.bytes.per.second": _d("DOUBLE", "1.7976931348623157E308"),
    "log.cleaner.backoff.ms": _d("LONG", "15000", 0),
    "metric.reporters": _d("LIST", "org.apache.kafka.common.metrics.JmxReporter"),
    "producer.id.expiration.ms": _d("INT", "86400000", 1),
    "transaction.partition.verification.enable": _d("BOOLEAN", "true"),
    "remote.log.index.file.cache.total.size.bytes": _d("LONG", "1073741824", 1),
    "remote.fetch.max.wait.ms": _d("INT", "500", 1),
    "remote.log.manager.copy.max.bytes.per.second": _d("LONG", _LONG_MAX, 1),
    "remote.log.manager.fetch.max.bytes.per.second": _d("LONG", _LONG_MAX, 1),
    "remote.list.offsets.request.timeout.ms": _d("LONG", "30000", 1),
    "leader.replication.throttled.rate": _d("LONG", _LONG_MAX, 0),
    "follower.replication.throttled.rate": _d("LONG", _LONG_MAX, 0),
    "replica.alter.log.dirs.io.max.bytes.per.second": _d("LONG", _LONG_MAX, 0),
}
# The topic configs' cluster defaults (DynamicLogConfig), at the topic configs' defaults.
LOG: Mapping[str, Def] = {broker: _d(DESCRIPTIONS[topic][0], DEFAULTS[topic])
                          for topic, broker in TOPIC_DEFAULT_NAMES.items()}

DYNAMIC: Mapping[str, Def] = {**SECURITY, **LISTENER, **THREADS, **OTHERS, **LOG}
"""Every dynamic broker config (Kafka's AllDynamicConfigs), by name."""

# Per-broker only: the listener configs but for the cluster-level connection limits.
_CLUSTER_LEVEL = frozenset({"max.connections", "max.connection.creation.rate",
                            "num.network.threads"})
_SOCKET_ONLY = frozenset({"max.connections.per.ip", "max.connections.per.ip.overrides"})
PER_BROKER = frozenset(SECURITY) | (frozenset(LISTENER) - _CLUSTER_LEVEL - _SOCKET_ONLY)
# Configs set per listener and SASL mechanism: listener.name.<l>.<mechanism>.<config>.
_MECHANISM_CONFIGS: Mapping[str, Def] = {
    "sasl.jaas.config": _d("PASSWORD", None), "sasl.login.callback.handler.class":
    _d("CLASS", None), "sasl.login.class": _d("CLASS", None),
    "sasl.server.callback.handler.class": _d("CLASS", None),
    "connections.max.reauth.ms": _d("LONG", "0")}
_LISTENER_PREFIXED = re.compile(r"listener\.name\.[^.]*\.(.*)")


def base_name(name: str) -> str | None:
    """The config a listener-prefixed name sets (`listener.name.<l>.<config>`, or the
    mechanism config of `listener.name.<l>.<mechanism>.<config>`), None if not prefixed."""
    matched = _LISTENER_PREFIXED.fullmatch(name)
    if matched is None:
        return None
    base = matched.group(1)
    return next((m for m in _MECHANISM_CONFIGS if base.endswith(m) and base not in DYNAMIC),
                base)


def definition(name: str) -> Def | None:
    """The definition of dynamic config `name` (a listener-prefixed one: its base's), None
    if Kafka would not update it dynamically."""
    base = base_name(name)
    if base is None:
        return DYNAMIC.get(name)
    return DYNAMIC.get(base) or _MECHANISM_CONFIGS.get(base)


def sensitive(name: str) -> bool:
    """Whether DescribeConfigs hides the value (Kafka: a PASSWORD, or of unknown type)."""
    found = definition(name)
    return found is None or found.kind == "PASSWORD"


def _kafka_set(names: Sequence[str] | set[str]) -> str:
    return f"Set({', '.join(sorted(names))})"  # how Kafka's messages list names


def _invalid(name: str, value: str, why: str) -> InvalidBrokerConfigError:
    return InvalidBrokerConfigError(f"Invalid value {value} for configuration {name}: {why}")


def _check_value(name: str, value: str) -> None:
    """Kafka's ConfigDef.parse of one value (its type, then its validator)."""
    base = base_name(name) or name
    if base in _TOPIC_OF:
        _, spec = declared(TopicConfig)[_TOPIC_OF[base]]
        try:
            spec.convert(value)
        except (ValueError, TypeError):
            raise _invalid(name, value, f"must be {spec.allowed}") from None
        return
    found = definition(name)
    if found is None or found.kind in ("STRING", "PASSWORD", "CLASS", "LIST"):
        if found is not None and found.options and value.strip() not in found.options:
            raise _invalid(name, value, f"String must be one of: {', '.join(found.options)}")
        return
    text = value.strip()
    if found.kind == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise _invalid(name, value, "Expected value to be either true or false")
        return
    try:
        number = float(text) if found.kind == "DOUBLE" else int(text, 10)
    except ValueError:
        raise _invalid(name, value, f"Not a number of type {found.kind}") from None
    lo, hi = _RANGES.get(found.kind, (None, None))
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise _invalid(name, value, f"Not a number of type {found.kind}")
    java = float if found.kind == "DOUBLE" else int  # the bound as Kafka's message shows it
    if found.lo is not None and number < found.lo:
        raise _invalid(name, value, f"Value must be at least {java(found.lo)}")
    if found.hi is not None and number > found.hi:
        raise _invalid(name, value, f"Value must be no more than {java(found.hi)}")


def validate(configs: Mapping[str, str], *, per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs of a resource's whole new set, in its
    order: names it cannot update dynamically, SSL configs without a listener prefix, each
    value's type and range, per-broker configs at the cluster default.
    InvalidBrokerConfigError (INVALID_REQUEST) with Kafka's words."""
    static = {n for n in configs if definition(n) is None}
    if static:
        raise InvalidBrokerConfigError(
            f"Cannot update these configs dynamically: {_kafka_set(static)}")
    unprefixed = {n for n in configs if n in SECURITY}
    if unprefixed:
        raise InvalidBrokerConfigError(
            "These security configs can be dynamically updated only per-listener using the"
            f" listener prefix: {_kafka_set(unprefixed)}")
    for name, value in configs.items():
        _check_value(name, value)
    if not per_broker:
        only = {n for n in configs if n in PER_BROKER
                or (base_name(n) or "") not in ("", *_CLUSTER_LEVEL)}
        if only:
            raise InvalidBrokerConfigError(
                "Cannot update these configs at default cluster level, broker id must be"
                f" specified: {_kafka_set(only)}")


def check_threads(before: Mapping[str, str], after: Mapping[str, str]) -> None:
    """DynamicThreadPool.validateReconfiguration: a thread count that changes stays within
    half and double of the current one (`before`/`after`: the effective configs)."""
    for name, spec in THREADS.items():
        old = int(before.get(name, spec.default or "0"))
        new = int(after.get(name, spec.default or "0"))
        if new == old:
            continue
        why = ("value should be at least 1" if new <= 0
               else f"value should be at least half the current value {old}" if new < old // 2
               else f"value should not be greater than double the current value {old}"
               if new > old * 2 else None)
        if why is not None:  # Kafka wraps it twice (processReconfiguration, ConfigException)
            raise InvalidBrokerConfigError(
                "Invalid value org.apache.kafka.common.config.ConfigException: Dynamic thread"
                f" count update validation failed for {name}={new}, {why} for configuration"
                " Invalid dynamic configuration")


def apply_changes(stored: Mapping[str, str], changes: Sequence[ConfigChange]
                  ) -> dict[str, str]:
    """The set after `changes`, as Kafka's ConfigAdminManager.prepareIncrementalConfigs:
    SET and DELETE any name, APPEND and SUBTRACT list-typed configs only, from the current
    value (Kafka's default when not set). InvalidConfigError (INVALID_CONFIG) otherwise;
    the result is checked by `validate`."""
    out = dict(stored)
    for c in changes:
        if c.op is AlterOp.SET:
            out[c.key] = c.value or ""
            continue
        if c.op is AlterOp.DELETE:
            out.pop(c.key, None)
            continue
        found = definition(c.key)
        verb = "append" if c.op is AlterOp.APPEND else "subtract"
        if found is None:
            raise InvalidConfigError(f"Unknown config name: {c.key}")
        if found.kind != "LIST":
            raise InvalidConfigError(
                f"Config value {verb} is not allowed for config key: {c.key}")
        current = out.get(c.key, found.default) or ""
        items = current.split(",") if current else []
        given = (c.value or "").split(",")
        if c.op is AlterOp.APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        out[c.key] = ",".join(items)
    return out


Levels = tuple[dict[str, str], dict[str, str]]
"""(the cluster-wide default's configs, one broker's configs)."""


def _levels(conn: sa.Connection, node_id: int) -> Levels:
    found = dynconfigs.stored(conn, BROKER, (CLUSTER_DEFAULT, str(node_id)))
    return found.get(CLUSTER_DEFAULT, {}), found.get(str(node_id), {})


def broker_configs(db: Database, node_id: int) -> Levels:
    """The dynamic configs of the cluster-wide default and of broker `node_id` (one read)."""
    with db.read() as conn:
        return _levels(conn, node_id)


def alter_broker_configs(db: Database, node_id: int, per_broker: bool,
                         changes: Sequence[ConfigChange], *, replace: bool = False,
                         validate_only: bool = False) -> dict[str, str]:
    """Apply `changes` to broker `node_id`'s dynamic configs (`per_broker`) or to the
    cluster-wide default's (IncrementalAlterConfigs; `replace`: to none, so the set becomes
    exactly what they set, as the legacy AlterConfigs), check the new set as Kafka's broker
    does (`apply_changes`, `validate`, `check_threads` against the effective configs of
    broker `node_id`, the one answering) and store it (not with `validate_only`); returns
    the new set. InvalidBrokerConfigError / InvalidConfigError commit nothing."""

    def compute(conn: sa.Connection) -> dict[str, str]:
        default, own = _levels(conn, node_id)
        configs = apply_changes({} if replace else (own if per_broker else default), changes)
        validate(configs, per_broker=per_broker)
        check_threads({**default, **own}, {**default, **configs} if per_broker
                      else {**configs, **own})
        return configs

    name = str(node_id) if per_broker else CLUSTER_DEFAULT
    return dynconfigs.replace(db, BROKER, name, compute, validate_only=validate_only)
