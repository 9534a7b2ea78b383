"""Kafka topic configs that siltstream honours: names, defaults, validation, and a typed view.

Configs are stored as the string map the user gave (like Kafka's per-topic overrides); every
key and value is validated up front so a bad map never reaches the database. `TopicConfig`
declares them with the settings layer's machinery (Kafka's names, defaults and ranges);
errors are InvalidConfigError, Kafka's INVALID_CONFIG.
"""

from __future__ import annotations

import enum
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

POLICY_DELETE = "delete"
POLICY_COMPACT = "compact"
POLICY_COMPACT_DELETE = "compact,delete"
POLICIES = (POLICY_DELETE, POLICY_COMPACT, POLICY_COMPACT_DELETE)

LONG_MAX = 9_223_372_036_854_775_807
LONG_MIN = -LONG_MAX - 1
INT_MAX = 2_147_483_647


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

    @property
    def compacted(self) -> bool:
        """Whether the policy includes compaction (latest record per key is kept)."""
        return POLICY_COMPACT in self.cleanup_policy.split(",")

    @property
    def rewrite_codec(self) -> Compression | None:
        """The codec of batches the compactor rewrites; None: each keeps its input codec."""
        return TOPIC_COMPRESSIONS[self.compression_type]

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
        return InvalidConfigError(
            f"invalid value {value!r} for topic config {key!r}: must be {allowed}")

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
DESCRIPTIONS: Mapping[str, tuple[str, str]] = {
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
    SEGMENT_BYTES: ("INT", "The segment size of the log (siltstream stores one segment per"
                    " partition per object; accepted for compatibility)."),
    COMPRESSION_TYPE: ("STRING", "The codec of batches the compactor rewrites: gzip, snappy,"
                       " lz4, zstd, uncompressed, or producer (keep the producer's codec)."),
}
if set(KNOWN_KEYS) != set(DESCRIPTIONS):
    raise AssertionError("every topic config needs its description in DESCRIPTIONS")

# Kafka's list-typed topic configs among these: APPEND and SUBTRACT apply to them only.
LIST_KEYS = frozenset({CLEANUP_POLICY})


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
