"""DescribeConfigs (key 32): TOPIC resources list every topic config (metadata/topicconfig.py,
their one definition) with its value and source (DYNAMIC_TOPIC_CONFIG when the topic
overrides it, else DEFAULT_CONFIG); synonyms when asked (the override, then the default);
config type and documentation in v3+.

BROKER resources, as Kafka's ConfigHelper: this agent's id lists its settings (every
section, as `silt agent` loaded and passed them in: `ServerContext.settings`) with their
sources (DEFAULT_CONFIG, or STATIC_BROKER_CONFIG from file, environment or flag), under
Kafka's broker config name where one means the same (`configs.KAFKA_BROKER_NAMES`:
`advertised.listeners`, `num.partitions`, ..., the setting's own key, such as
`agent.num.partitions`, its synonym), else under that key; the broker configs holding the
topic configs' cluster defaults (`log.retention.ms`, `message.max.bytes`, ...) at those
defaults; Kafka's other dynamic broker configs at Kafka's defaults; and over them the
dynamic broker configs stored (`metadata.brokerconfig`: this agent's, then the cluster-wide
default's), each entry's synonyms in Kafka's order (DYNAMIC_BROKER_CONFIG,
DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG). Read-only unless
Kafka updates it dynamically; stored values are not applied (the documentation says so).
The empty name lists the cluster-wide default's dynamic configs only. Passwords and the
metadata URL are sensitive (no value sent).

GROUP resources (any group id, existing or not, as Kafka 4.0's ConfigHelper) list Kafka
4.0's GroupConfig keys (`metadata.groupconfig`) at Kafka's defaults or as stored
(GROUP_CONFIG): they govern KIP-848 consumer and KIP-932 share groups, which silt does not
serve (its groups are all classic): stored, not applied; an empty group name is
INVALID_REQUEST. An unknown topic gets UNKNOWN_TOPIC_OR_PARTITION, another resource type
INVALID_REQUEST (as ConfigHelper answers an unsupported one).
DESCRIBE_CONFIGS is needed on the topic or group, on the cluster for a BROKER resource (else
TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED for that resource, as KafkaApis).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.describe_configs import v1, v2, v3, v4
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import Operation
from metadata import brokerconfig
from metadata.brokerconfig import TOPIC_DEFAULT_NAMES
from metadata.errors import InvalidTopicError, UnknownTopicError
from metadata.groupconfig import GROUP_CONFIGS
from metadata.topicconfig import DEFAULTS, DESCRIPTIONS
from metadata.topics import validate_topic_name
from settings import show

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import error_code
from .configs import (
    KAFKA_BROKER_NAMES,
    ConfigSource,
    ResourceType,
    broker_error,
    config_refusal,
    config_type,
    node_id,
)

Request = (v1.DescribeConfigsRequest | v2.DescribeConfigsRequest | v3.DescribeConfigsRequest
           | v4.DescribeConfigsRequest)
"""kio's DescribeConfigsRequest of each version served (1-4)."""
Resource = (v1.request.DescribeConfigsResource | v2.request.DescribeConfigsResource
            | v3.request.DescribeConfigsResource | v4.request.DescribeConfigsResource)


SENSITIVE = frozenset({"metadata.url"})  # may carry a database password


@dataclass(frozen=True, slots=True)
class Entry:
    """One config of a resource as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...]
    kind: str
    doc: str | None


Described = tuple[ErrorCode, str | None, Sequence[Entry]]


def _topic(ctx: ServerContext, name: str) -> Described:
    try:
        info = ctx.metadata.get_topic(validate_topic_name(name))
    except (InvalidTopicError, UnknownTopicError) as exc:  # Kafka's ConfigHelper checks
        return error_code(exc), str(exc), ()  # Topic.validate first
    entries = []
    effective = dict(info.config.items())
    for key, default in DEFAULTS.items():
        kind, doc = DESCRIPTIONS[key]
        synonyms = [(key, default, ConfigSource.DEFAULT_CONFIG)]
        source = ConfigSource.DEFAULT_CONFIG
        if key in info.configs:
            source = ConfigSource.DYNAMIC_TOPIC_CONFIG
            synonyms.insert(0, (key, info.configs[key], source))
        entries.append(Entry(key, show(effective[key]), source, False, False,
                             tuple(synonyms), kind, doc))
    return ErrorCode.none, None, entries


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "LONG"
    return "DOUBLE" if isinstance(value, float) else "STRING"


STORED = ("Kafka's dynamic broker config: stored and described here, not applied (the agent"
          " runs on its settings).")


def _settings(ctx: ServerContext) -> list[Entry]:
    """This agent's settings under Kafka's names where one means the same, then the topic
    configs' cluster defaults, then silt's own settings."""
    kafka, own = [], []
    for v in ctx.settings:
        source = (ConfigSource.DEFAULT_CONFIG if v.default
                  else ConfigSource.STATIC_BROKER_CONFIG)
        sensitive = v.key in SENSITIVE
        value = None if sensitive else show(v.value)
        kafka_name = KAFKA_BROKER_NAMES.get(v.key)
        if kafka_name is None:
            own.append(Entry(v.key, value, source, True, sensitive,
                             ((v.key, value, source),), _kind(v.value), None))
        else:
            kafka.append(Entry(kafka_name, value, source, True, sensitive,
                               ((kafka_name, value, source), (v.key, value, source)),
                               _kind(v.value), f"The agent setting {v.key}."))
    for topic_key, broker_key in TOPIC_DEFAULT_NAMES.items():
        default = DEFAULTS[topic_key]
        kafka.append(Entry(broker_key, default, ConfigSource.DEFAULT_CONFIG, True, False,
                           ((broker_key, default, ConfigSource.DEFAULT_CONFIG),),
                           DESCRIPTIONS[topic_key][0],
                           f"The default of topic config {topic_key} (Kafka's)."))
    return kafka + own


def _at_default(name: str) -> Entry:
    """A dynamic broker config no setting stands for, at Kafka's default."""
    spec = brokerconfig.DYNAMIC[name]
    hidden = brokerconfig.sensitive(name)
    value = None if hidden else spec.default
    synonyms = () if spec.default is None else (
        (name, value, ConfigSource.DEFAULT_CONFIG),)
    return Entry(name, value, ConfigSource.DEFAULT_CONFIG, False, hidden, synonyms,
                 spec.kind, STORED)


def _overlaid(entry: Entry, layers: Sequence[tuple[dict[str, str], ConfigSource]]) -> Entry:
    """`entry` with the dynamic values stored for its name first, as Kafka orders synonyms
    (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
    DEFAULT_CONFIG); read-only unless Kafka updates it dynamically."""
    dynamic = brokerconfig.definition(entry.name) is not None
    hidden = entry.sensitive or (dynamic and brokerconfig.sensitive(entry.name))
    stored = tuple((entry.name, None if hidden else configs[entry.name], source)
                   for configs, source in layers if entry.name in configs)
    if not stored:
        return dataclasses.replace(entry, read_only=False) if dynamic else entry
    return dataclasses.replace(
        entry, value=stored[0][1], source=stored[0][2], read_only=False, sensitive=hidden,
        synonyms=stored + entry.synonyms, doc=STORED)


def _broker(ctx: ServerContext, name: str) -> Described:
    problem = broker_error(ctx, name, describe=True)
    if problem is not None:
        return ErrorCode.invalid_request, problem, ()
    me = node_id(ctx)
    default, own = ctx.metadata.broker_configs(-1 if me is None else me)
    cluster = (default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    if name == "":  # as Kafka: the cluster-wide default's dynamic configs only
        return ErrorCode.none, None, [
            _overlaid(_blank(key), (cluster,)) for key in sorted(default)]
    entries = _settings(ctx)
    listed = {e.name for e in entries}
    entries += [_at_default(n) for n in brokerconfig.DYNAMIC if n not in listed]
    listed |= set(brokerconfig.DYNAMIC)
    entries += [_blank(n) for n in sorted({*own, *default} - listed)]  # per-listener ones
    layers = ((own, ConfigSource.DYNAMIC_BROKER_CONFIG), cluster)
    return ErrorCode.none, None, [_overlaid(e, layers) for e in entries]


def _blank(name: str) -> Entry:
    """A stored dynamic config with nothing beneath it (a per-listener one, or any at the
    cluster default), of its base config's type."""
    spec = brokerconfig.definition(name)
    return Entry(name, None, ConfigSource.DEFAULT_CONFIG, False, brokerconfig.sensitive(name),
                 (), "STRING" if spec is None else spec.kind, STORED)


GROUP_DOC = ("Kafka 4.0's group config: governs consumer-protocol and share groups, which silt"
             " does not serve; stored and described here, not applied.")


def _group(ctx: ServerContext, name: str) -> Described:
    if not name:
        return ErrorCode.invalid_request, "Group name must not be empty", ()
    stored = ctx.metadata.group_configs(name)
    entries = []
    for key, spec in GROUP_CONFIGS.items():
        synonyms = [(spec.broker or key, spec.default, ConfigSource.DEFAULT_CONFIG)]
        source = ConfigSource.DEFAULT_CONFIG
        if key in stored:
            source = ConfigSource.GROUP_CONFIG
            synonyms.insert(0, (key, stored[key], source))
        entries.append(Entry(key, synonyms[0][1], source, False, False, tuple(synonyms),
                             spec.kind, GROUP_DOC))
    return ErrorCode.none, None, entries


def describe_all(ctx: ServerContext, request: Request,
                 refused: list[tuple[ErrorCode, str] | None]
                 ) -> list[tuple[Resource, Described]]:
    """Each resource's configs (blocking: runs in the pool); those `refused` (no
    DESCRIBE_CONFIGS) answer its error without configs."""
    out: list[tuple[Resource, Described]] = []
    resources: list[Resource] = list(request.resources)
    for r, denied in zip(resources, refused, strict=True):
        if denied is not None:
            out.append((r, (*denied, [])))
            continue
        if int(r.resource_type) == ResourceType.TOPIC:
            described = _topic(ctx, r.resource_name)
        elif int(r.resource_type) == ResourceType.BROKER:
            described = _broker(ctx, r.resource_name)
        elif int(r.resource_type) == ResourceType.GROUP:
            described = _group(ctx, r.resource_name)
        else:
            described = (ErrorCode.invalid_request,
                         f"resource type {r.resource_type} is not supported", ())
        if r.configuration_keys is not None:  # null: every config (empty: none, as Kafka)
            wanted = set(r.configuration_keys)
            described = (*described[:2], [e for e in described[2] if e.name in wanted])
        out.append((r, described))
    return out


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    refused = [config_refusal(ctx, Operation.DESCRIBE_CONFIGS, int(r.resource_type),
                              r.resource_name) for r in request.resources]
    results = await ctx.run(describe_all, ctx, request, refused)
    synonyms = request.include_synonyms  # every version served (1+) has it
    docs = isinstance(request, v3.DescribeConfigsRequest | v4.DescribeConfigsRequest) \
        and request.include_documentation

    def entry(e: Entry) -> Entity:
        return b("DescribeConfigsResourceResult", name=e.name, value=e.value,
                 read_only=e.read_only, config_source=e.source.value,
                 is_sensitive=e.sensitive, config_type=config_type(e.kind),
                 documentation=e.doc if docs else None,
                 synonyms=tuple(b("DescribeConfigsSynonym", name=n, value=v, source=s.value)
                                for n, v, s in e.synonyms) if synonyms else ())

    return b("DescribeConfigsResponse", throttle_time=NO_THROTTLE, results=tuple(
        b("DescribeConfigsResult", error_code=error, error_message=message,
          resource_type=r.resource_type, resource_name=r.resource_name,
          configs=tuple(entry(e) for e in entries))
        for r, (error, message, entries) in results))
