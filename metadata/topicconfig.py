"""Kafka topic configs that siltstream honours: names, defaults, validation, and a typed view.

Configs are stored as the string map the user gave (like Kafka's per-topic overrides); every
key and value is validated up front so a bad map never reaches the database. `TopicConfig`
declares them with the settings layer's machinery (Kafka's names, defaults and ranges);
errors are InvalidConfigError, Kafka's INVALID_CONFIG.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from fileformat import PRODUCER, TOPIC_COMPRESSIONS, Compression
from settings import Section, choice, declared, integer, number, setting, show

from .errors import InvalidConfigError

CLEANUP_POLICY = "cleanup.policy"
RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
DELETE_RETENTION_MS = "delete.retention.ms"
MIN_CLEANABLE_DIRTY_RATIO = "min.cleanable.dirty.ratio"
MIN_COMPACTION_LAG_MS = "min.compaction.lag.ms"
MAX_COMPACTION_LAG_MS = "max.compaction.lag.ms"
MAX_MESSAGE_BYTES = "max.message.bytes"
SEGMENT_BYTES = "segment.bytes"
COMPRESSION_TYPE = "compression.type"
MESSAGE_TIMESTAMP_TYPE = "message.timestamp.type"

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)

POLICY_DELETE = "delete"
POLICY_COMPACT = "compact"
POLICY_COMPACT_DELETE = "compact,delete"
POLICIES = (POLICY_DELETE, POLICY_COMPACT, POLICY_COMPACT_DELETE)

LONG_MAX = 9_223_372_036_854_775_807
LONG_MIN = -LONG_MAX - 1
INT_MAX = 2_147_483_647


def _boolean(key: str, default: bool) -> bool:
    """A Kafka BOOLEAN config: "true" or "false", case-insensitive (ConfigDef.parseType)."""
    def parse(text: str) -> bool:
        word = text.strip().lower()
        if word not in ("true", "false"):
            raise ValueError(text)
        return word == "true"

    return setting(key, default, allowed="true or false",
                   check=lambda v: isinstance(v, bool), parse=parse)


def _level(key: str, default: int, lo: int, hi: int, also: int | None = None) -> int:
    """A codec level: an integer in [lo, hi] (or `also`, the codec's own default marker)."""
    extra = "" if also is None else f" or {also}"
    return setting(key, default, allowed=f"an integer in [{lo}, {hi}]{extra}",
                   check=lambda v: isinstance(v, int) and not isinstance(v, bool)
                   and (lo <= v <= hi or v == also),
                   parse=lambda t: int(t.strip(), 10))


def _throttled(value: str) -> bool:
    """Kafka's ThrottledReplicaListValidator: empty, "*", or partition:broker id pairs."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if items == ["*"] or not items:
        return True
    pair = re.compile(r"^[0-9]+:[0-9]+$")
    return all(pair.match(v) for v in items)


def _throttled_list(key: str) -> str:
    return setting(key, "", allowed="a list of partition:brokerId pairs, or '*'",
                   check=lambda v: isinstance(v, str) and _throttled(v),
                   parse=lambda t: ",".join(v.strip() for v in t.split(",") if v.strip()))


def _policy(value: str) -> str:
    """A cleanup.policy list in canonical order ("delete,compact" -> "compact,delete")."""
    return ",".join(sorted({p.strip() for p in value.split(",")}))


@dataclass(frozen=True, slots=True)
class TopicConfig(Section):
    """A topic's effective configs (defaults filled in), typed. Ranges follow Kafka's
    LogConfig validators."""

    SECTION: ClassVar[str] = "topic"

    cleanup_policy: str = setting(
        CLEANUP_POLICY, POLICY_DELETE, allowed="one of " + ", ".join(map(repr, POLICIES)),
        check=lambda v: v in POLICIES, parse=_policy)
    retention_ms: int = integer(RETENTION_MS, 604_800_000, lo=-1, hi=LONG_MAX)
    retention_bytes: int = integer(RETENTION_BYTES, -1, lo=-1, hi=LONG_MAX)
    delete_retention_ms: int = integer(DELETE_RETENTION_MS, 86_400_000, lo=0, hi=LONG_MAX)
    min_cleanable_dirty_ratio: float = number(MIN_CLEANABLE_DIRTY_RATIO, 0.5, lo=0, hi=1)
    min_compaction_lag_ms: int = integer(MIN_COMPACTION_LAG_MS, 0, lo=0, hi=LONG_MAX)
    max_compaction_lag_ms: int = integer(MAX_COMPACTION_LAG_MS, LONG_MAX, lo=1, hi=LONG_MAX)
    max_message_bytes: int = integer(MAX_MESSAGE_BYTES, 1_048_588, lo=0, hi=INT_MAX)
    segment_bytes: int = integer(SEGMENT_BYTES, 1_073_741_824, lo=14, hi=INT_MAX)
    # The codec the compactor rewrites partially surviving batches in; `producer` keeps each
    # batch's own. Batches are stored as produced (never recompressed on the produce path).
    compression_type: str = choice(COMPRESSION_TYPE, PRODUCER,
                                   {name: name for name in TOPIC_COMPRESSIONS})
    # CreateTime: records keep their producer's timestamps. LogAppendTime: the agent stamps
    # each batch (timestamp type bit, maxTimestamp) with its own clock, as Kafka's broker does.
    message_timestamp_type: str = setting(
        MESSAGE_TIMESTAMP_TYPE, CREATE_TIME,
        allowed="one of " + ", ".join(TIMESTAMP_TYPES),
        check=lambda v: v in TIMESTAMP_TYPES, parse=str.strip)

    # Accepted for compatibility, stored and described, without effect here (IGNORED says
    # why). Kafka 4.0's LogConfig types, defaults and ranges; the last four names are older
    # Kafka's, still sent by clients and tools.
    segment_ms: int = integer("segment.ms", 604_800_000, lo=1, hi=LONG_MAX)
    segment_jitter_ms: int = integer("segment.jitter.ms", 0, lo=0, hi=LONG_MAX)
    segment_index_bytes: int = integer("segment.index.bytes", 10_485_760, lo=4, hi=INT_MAX)
    flush_messages: int = integer("flush.messages", LONG_MAX, lo=1, hi=LONG_MAX)
    flush_ms: int = integer("flush.ms", LONG_MAX, lo=0, hi=LONG_MAX)
    index_interval_bytes: int = integer("index.interval.bytes", 4096, lo=0, hi=INT_MAX)
    file_delete_delay_ms: int = integer("file.delete.delay.ms", 60_000, lo=0, hi=LONG_MAX)
    unclean_leader_election_enable: bool = _boolean("unclean.leader.election.enable", False)
    min_insync_replicas: int = integer("min.insync.replicas", 1, lo=1, hi=INT_MAX)
    compression_gzip_level: int = _level("compression.gzip.level", -1, 1, 9, also=-1)
    compression_lz4_level: int = _level("compression.lz4.level", 9, 1, 17)
    compression_zstd_level: int = _level("compression.zstd.level", 3, -131_072, 22)
    preallocate: bool = _boolean("preallocate", False)
    message_timestamp_before_max_ms: int = integer(
        "message.timestamp.before.max.ms", LONG_MAX, lo=0, hi=LONG_MAX)
    message_timestamp_after_max_ms: int = integer(
        "message.timestamp.after.max.ms", LONG_MAX, lo=0, hi=LONG_MAX)
    leader_replication_throttled_replicas: str = _throttled_list(
        "leader.replication.throttled.replicas")
    follower_replication_throttled_replicas: str = _throttled_list(
        "follower.replication.throttled.replicas")
    remote_storage_enable: bool = _boolean("remote.storage.enable", False)
    local_retention_ms: int = integer("local.retention.ms", -2, lo=-2, hi=LONG_MAX)
    local_retention_bytes: int = integer("local.retention.bytes", -2, lo=-2, hi=LONG_MAX)
    remote_log_copy_disable: bool = _boolean("remote.log.copy.disable", False)
    remote_log_delete_on_disable: bool = _boolean("remote.log.delete.on.disable", False)
    message_timestamp_difference_max_ms: int = integer(
        "message.timestamp.difference.max.ms", LONG_MAX, lo=0, hi=LONG_MAX)
    message_format_version: str = setting(
        "message.format.version", "3.0-IV1", allowed="a Kafka version such as 3.0-IV1",
        check=lambda v: isinstance(v, str) and bool(re.match(r"^[0-9]+\.[0-9]+", v)),
        parse=str.strip)
    message_downconversion_enable: bool = _boolean("message.downconversion.enable", True)

    @property
    def compacted(self) -> bool:
        """Whether the policy includes compaction (latest record per key is kept)."""
        return POLICY_COMPACT in self.cleanup_policy.split(",")

    @property
    def rewrite_codec(self) -> Compression | None:
        """The codec of batches the compactor rewrites; None: each keeps its input codec."""
        return TOPIC_COMPRESSIONS[self.compression_type]

    @property
    def log_append_time(self) -> bool:
        """Whether the agent stamps batches with its clock (message.timestamp.type)."""
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def deletes(self) -> bool:
        """Whether the policy includes time/size retention deletion."""
        return POLICY_DELETE in self.cleanup_policy.split(",")

    def check_across(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"topic config {MIN_COMPACTION_LAG_MS!r}={self.min_compaction_lag_ms} must not"
                f" exceed {MAX_COMPACTION_LAG_MS!r}={self.max_compaction_lag_ms}"
            )

    @classmethod
    def invalid(cls, key: str, value: object, allowed: str, where: str = "") -> InvalidConfigError:
        return InvalidConfigError(  # Kafka's ConfigException shape, then what is allowed
            f"Invalid value {value} for configuration {key}: must be {allowed}")

    @classmethod
    def unknown(cls, key: str, where: str = "") -> InvalidConfigError:
        return InvalidConfigError(
            f"unknown topic config {key!r}; allowed keys: {', '.join(declared(cls))}")

    @classmethod
    def from_map(cls, values: Mapping[str, object], **fields: object) -> TopicConfig:
        """Parse a (possibly partial) string map; missing keys take Kafka's defaults."""
        validate_keys(values)
        return super(TopicConfig, cls).from_map(values, **fields)


DEFAULTS: Mapping[str, str] = {key: show(value) for key, value in TopicConfig().items()}
KNOWN_KEYS = tuple(DEFAULTS)


# What DescribeConfigs says of each config: its Kafka type (ConfigType name) and its
# documentation (after Kafka's TopicConfig docs, with what siltstream does with it).
_KAFKA_DOCS: Mapping[str, tuple[str, str]] = {
    CLEANUP_POLICY: ("LIST", "The retention policy of old log segments: \"delete\" drops them"
                     " past retention.ms/retention.bytes, \"compact\" keeps the latest record"
                     " of each key; both may be given."),
    RETENTION_MS: ("LONG", "How long a log keeps records before old segments are deleted"
                   " (delete policy); -1: no time limit."),
    RETENTION_BYTES: ("LONG", "The size a partition may grow to before old segments are"
                      " deleted (delete policy); -1: no size limit."),
    DELETE_RETENTION_MS: ("LONG", "How long tombstones are kept for compacted topics, so"
                          " consumers reading from the start see them."),
    MIN_CLEANABLE_DIRTY_RATIO: ("DOUBLE", "How dirty (uncompacted) a log must be before the"
                                " compactor cleans it."),
    MIN_COMPACTION_LAG_MS: ("LONG", "The minimum time a record stays uncompacted."),
    MAX_COMPACTION_LAG_MS: ("LONG", "The maximum time a record may stay ineligible for"
                            " compaction."),
    MAX_MESSAGE_BYTES: ("INT", "The largest record batch size allowed."),
    SEGMENT_BYTES: ("INT", "The segment file size of the log."),
    COMPRESSION_TYPE: ("STRING", "The codec of batches the compactor rewrites: gzip, snappy,"
                       " lz4, zstd, uncompressed, or producer (keep the producer's codec)."),
    MESSAGE_TIMESTAMP_TYPE: ("STRING", "CreateTime: records keep the producer's timestamps;"
                             " LogAppendTime: the agent stamps each batch with its clock."),
    "segment.ms": ("LONG", "The time after which Kafka rolls a segment."),
    "segment.jitter.ms": ("LONG", "Random jitter subtracted from segment.ms."),
    "segment.index.bytes": ("INT", "The size of a segment's offset index."),
    "flush.messages": ("LONG", "Records written between forced fsyncs of the log."),
    "flush.ms": ("LONG", "Time between forced fsyncs of the log."),
    "index.interval.bytes": ("INT", "Bytes between offset index entries."),
    "file.delete.delay.ms": ("LONG", "How long a deleted segment file lingers."),
    "unclean.leader.election.enable": ("BOOLEAN", "Whether an out-of-sync replica may lead."),
    "min.insync.replicas": ("INT", "Replicas that must acknowledge an acks=all write."),
    "compression.gzip.level": ("INT", "The gzip level when compression.type is gzip."),
    "compression.lz4.level": ("INT", "The lz4 level when compression.type is lz4."),
    "compression.zstd.level": ("INT", "The zstd level when compression.type is zstd."),
    "preallocate": ("BOOLEAN", "Whether segment files are preallocated on disk."),
    "message.timestamp.before.max.ms": ("LONG", "How far a record's timestamp may lie in"
                                        " the past of the broker's clock."),
    "message.timestamp.after.max.ms": ("LONG", "How far a record's timestamp may lie in"
                                       " the future of the broker's clock."),
    "leader.replication.throttled.replicas": ("LIST", "Replicas throttled on the leader."),
    "follower.replication.throttled.replicas": ("LIST", "Replicas throttled on followers."),
    "remote.storage.enable": ("BOOLEAN", "Tiered storage for the topic (KIP-405)."),
    "local.retention.ms": ("LONG", "Local retention time with tiered storage."),
    "local.retention.bytes": ("LONG", "Local retention size with tiered storage."),
    "remote.log.copy.disable": ("BOOLEAN", "Stop copying segments to tiered storage."),
    "remote.log.delete.on.disable": ("BOOLEAN", "Delete tiered data when tiering is off."),
    "message.timestamp.difference.max.ms": ("LONG", "Older Kafka's bound on a record's"
                                            " timestamp distance (before 4.0)."),
    "message.format.version": ("STRING", "Older Kafka's on-disk record format (before 4.0)."),
    "message.downconversion.enable": ("BOOLEAN", "Older Kafka's down-conversion for old"
                                      " consumers (before 4.0)."),
}
if set(KNOWN_KEYS) != set(_KAFKA_DOCS):
    raise AssertionError("every topic config needs its description in DESCRIPTIONS")

# Topic configs accepted, stored and described but without effect here, and why: the one
# table docs/operations.md shows (tests keep the two equal). Every other config is applied.
_LOCAL_LOG = "no local log segments: data lives in object-store files the agents write"
_REPLICAS = "no replicas: the object store is the replication, any agent serves any partition"
_TIERING = "no tiering: the object store is the only storage"
_VALIDATOR = "not yet: produce does not check record timestamps (the LogValidator work)"
_OLD = "removed in Kafka 4.0; record batches are always v2 here"
IGNORED: Mapping[str, str] = {
    SEGMENT_BYTES: _LOCAL_LOG,
    "segment.ms": _LOCAL_LOG,
    "segment.jitter.ms": _LOCAL_LOG,
    "segment.index.bytes": _LOCAL_LOG,
    "index.interval.bytes": _LOCAL_LOG,
    "file.delete.delay.ms": _LOCAL_LOG,
    "preallocate": _LOCAL_LOG,
    "flush.messages": "no fsync: a write is acknowledged once its file is in the object store",
    "flush.ms": "no fsync: a write is acknowledged once its file is in the object store",
    "unclean.leader.election.enable": _REPLICAS,
    "min.insync.replicas": _REPLICAS,
    "leader.replication.throttled.replicas": _REPLICAS,
    "follower.replication.throttled.replicas": _REPLICAS,
    "remote.storage.enable": _TIERING,
    "local.retention.ms": _TIERING,
    "local.retention.bytes": _TIERING,
    "remote.log.copy.disable": _TIERING,
    "remote.log.delete.on.disable": _TIERING,
    "compression.gzip.level": "not yet: the compactor rewrites with each codec's default level",
    "compression.lz4.level": "not yet: the compactor rewrites with each codec's default level",
    "compression.zstd.level": "not yet: the compactor rewrites with each codec's default level",
    "message.timestamp.before.max.ms": _VALIDATOR,
    "message.timestamp.after.max.ms": _VALIDATOR,
    "message.timestamp.difference.max.ms": _VALIDATOR,
    "message.format.version": _OLD,
    "message.downconversion.enable": _OLD,
}
if not set(IGNORED) <= set(KNOWN_KEYS):
    raise AssertionError("IGNORED names configs that are not declared")

# What DescribeConfigs sends: the type, and the documentation with siltstream's no-ops marked.
DESCRIPTIONS: Mapping[str, tuple[str, str]] = {
    key: (kind, doc if key not in IGNORED else f"{doc} Accepted and ignored here: {IGNORED[key]}.")
    for key, (kind, doc) in _KAFKA_DOCS.items()}

# Kafka's list-typed topic configs among these: APPEND and SUBTRACT apply to them only.
LIST_KEYS = frozenset({CLEANUP_POLICY, "leader.replication.throttled.replicas",
                       "follower.replication.throttled.replicas"})


def ignored_table() -> str:
    """The markdown table of IGNORED (docs/operations.md carries it verbatim)."""
    rows = ["| topic config | why it has no effect |", "|---|---|"]
    rows += [f"| `{key}` | {why} |" for key, why in sorted(IGNORED.items())]
    return "\n".join(rows) + "\n"


class AlterOp(enum.IntEnum):
    """IncrementalAlterConfigs' operations (Kafka's AlterConfigOp.OpType ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One incremental change of a topic config: `op` on `key` with `value` (None: DELETE)."""

    key: str
    op: AlterOp
    value: str | None = None


def apply_changes(stored: Mapping[str, str], changes: Sequence[ConfigChange]) -> dict[str, str]:
    """The override map after `changes`, in order, validated as create validates a map (so
    the result is what to store). Kafka's semantics: SET overrides, DELETE reverts to the
    default, APPEND/SUBTRACT add or remove list elements of the current value (the default
    when not overridden) and apply to list-typed configs only. InvalidConfigError otherwise.
    """
    out = dict(stored)
    for c in changes:
        if c.key not in DEFAULTS:
            raise TopicConfig.unknown(c.key)
        if c.op is AlterOp.DELETE:
            out.pop(c.key, None)
            continue
        if c.value is None:
            raise TopicConfig.invalid(c.key, c.value, "a string")
        if c.op is AlterOp.SET:
            out[c.key] = c.value
            continue
        if c.key not in LIST_KEYS:
            raise InvalidConfigError(
                f"config value {c.op.name.lower()} is not allowed for config key {c.key!r}:"
                " it is not a list")
        items = [v.strip() for v in out.get(c.key, DEFAULTS[c.key]).split(",") if v.strip()]
        given = [v.strip() for v in c.value.split(",") if v.strip()]
        if c.op is AlterOp.APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        out[c.key] = ",".join(items)
    return validate_configs(out)


def validate_keys(configs: Mapping[str, object]) -> None:
    """Reject unknown keys and non-string values with InvalidConfigError."""
    for key, value in configs.items():
        if key not in DEFAULTS:
            raise TopicConfig.unknown(key)
        if not isinstance(value, str):
            raise TopicConfig.invalid(key, value, "a string")


def validate_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Check every key and value; return the map to store (values stripped, policy canonical).

    Raises InvalidConfigError naming the offending key and what is allowed.
    """
    TopicConfig.from_map(configs)  # every key, every value, cross-key checks
    canonical: dict[str, Callable[[str], str]] = {
        CLEANUP_POLICY: _policy, COMPRESSION_TYPE: lambda v: v.strip().lower()}
    return {key: canonical.get(key, str.strip)(value) for key, value in configs.items()}
