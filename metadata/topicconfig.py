"""Kafka topic configs that siltstream honours: names, defaults, validation, and a typed view.

Configs are stored as the string map the user gave (like Kafka's per-topic overrides); every
key and value is validated up front so a bad map never reaches the database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

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

POLICY_DELETE = "delete"
POLICY_COMPACT = "compact"
POLICY_COMPACT_DELETE = "compact,delete"
POLICIES = (POLICY_DELETE, POLICY_COMPACT, POLICY_COMPACT_DELETE)

LONG_MAX = 9_223_372_036_854_775_807
LONG_MIN = -LONG_MAX - 1
INT_MAX = 2_147_483_647

DEFAULTS: Mapping[str, str] = {
    CLEANUP_POLICY: POLICY_DELETE,
    RETENTION_MS: "604800000",
    RETENTION_BYTES: "-1",
    DELETE_RETENTION_MS: "86400000",
    MIN_CLEANABLE_DIRTY_RATIO: "0.5",
    MIN_COMPACTION_LAG_MS: "0",
    MAX_COMPACTION_LAG_MS: str(LONG_MAX),
    MAX_MESSAGE_BYTES: "1048588",
    SEGMENT_BYTES: "1073741824",
}
KNOWN_KEYS = tuple(DEFAULTS)


def _bad(key: str, value: str, allowed: str) -> InvalidConfigError:
    return InvalidConfigError(f"invalid value {value!r} for topic config {key!r}: {allowed}")


def _policy(key: str, value: str) -> str:
    parts = sorted({p.strip() for p in value.split(",")})
    if parts and all(p in (POLICY_COMPACT, POLICY_DELETE) for p in parts):
        return ",".join(parts)  # sorted: "compact,delete" whichever order was given
    raise _bad(key, value, "allowed values are " + ", ".join(repr(p) for p in POLICIES))


def _integer(lo: int, hi: int) -> Callable[[str, str], int]:
    def parse(key: str, value: str) -> int:
        allowed = f"must be an integer in [{lo}, {hi}]"
        try:
            n = int(value.strip(), 10)
        except ValueError:
            raise _bad(key, value, allowed) from None
        if not lo <= n <= hi:
            raise _bad(key, value, allowed)
        return n

    return parse


def _ratio(key: str, value: str) -> float:
    allowed = "must be a number in [0, 1]"
    try:
        x = float(value.strip())
    except ValueError:
        raise _bad(key, value, allowed) from None
    if not 0.0 <= x <= 1.0:  # also rejects nan
        raise _bad(key, value, allowed)
    return x


# Ranges follow Kafka's LogConfig validators.
_PARSERS: Mapping[str, Callable[[str, str], object]] = {
    CLEANUP_POLICY: _policy,
    RETENTION_MS: _integer(-1, LONG_MAX),
    RETENTION_BYTES: _integer(-1, LONG_MAX),
    DELETE_RETENTION_MS: _integer(0, LONG_MAX),
    MIN_CLEANABLE_DIRTY_RATIO: _ratio,
    MIN_COMPACTION_LAG_MS: _integer(0, LONG_MAX),
    MAX_COMPACTION_LAG_MS: _integer(1, LONG_MAX),
    MAX_MESSAGE_BYTES: _integer(0, INT_MAX),
    SEGMENT_BYTES: _integer(14, INT_MAX),
}


def validate_keys(configs: Mapping[str, object]) -> None:
    """Reject unknown keys and non-string values with InvalidConfigError."""
    for key, value in configs.items():
        if key not in _PARSERS:
            raise InvalidConfigError(
                f"unknown topic config {key!r}; allowed keys: {', '.join(KNOWN_KEYS)}"
            )
        if not isinstance(value, str):
            raise InvalidConfigError(
                f"invalid value {value!r} for topic config {key!r}: must be a string"
            )


def validate_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Check every key and value; return the map to store (values stripped, policy canonical).

    Raises InvalidConfigError naming the offending key and what is allowed.
    """
    validate_keys(configs)
    out: dict[str, str] = {}
    for key, value in configs.items():
        parsed = _PARSERS[key](key, value)
        out[key] = parsed if isinstance(parsed, str) else value.strip()
    TopicConfig.from_map(out)  # cross-key checks
    return out


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's effective configs (defaults filled in), typed."""

    cleanup_policy: str = POLICY_DELETE
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    delete_retention_ms: int = 86_400_000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    segment_bytes: int = 1_073_741_824

    @property
    def compacted(self) -> bool:
        """Whether the policy includes compaction (latest record per key is kept)."""
        return POLICY_COMPACT in self.cleanup_policy.split(",")

    @property
    def deletes(self) -> bool:
        """Whether the policy includes time/size retention deletion."""
        return POLICY_DELETE in self.cleanup_policy.split(",")

    @classmethod
    def from_map(cls, configs: Mapping[str, str]) -> TopicConfig:
        """Parse a (possibly partial) string map; missing keys take Kafka's defaults."""
        validate_keys(configs)
        merged = {**DEFAULTS, **configs}

        def num(key: str) -> int:
            value = _PARSERS[key](key, merged[key])
            assert isinstance(value, int)
            return value

        ratio = _ratio(MIN_CLEANABLE_DIRTY_RATIO, merged[MIN_CLEANABLE_DIRTY_RATIO])
        cfg = cls(
            cleanup_policy=_policy(CLEANUP_POLICY, merged[CLEANUP_POLICY]),
            retention_ms=num(RETENTION_MS),
            retention_bytes=num(RETENTION_BYTES),
            delete_retention_ms=num(DELETE_RETENTION_MS),
            min_cleanable_dirty_ratio=ratio,
            min_compaction_lag_ms=num(MIN_COMPACTION_LAG_MS),
            max_compaction_lag_ms=num(MAX_COMPACTION_LAG_MS),
            max_message_bytes=num(MAX_MESSAGE_BYTES),
            segment_bytes=num(SEGMENT_BYTES),
        )
        if cfg.min_compaction_lag_ms > cfg.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"topic config {MIN_COMPACTION_LAG_MS!r}={cfg.min_compaction_lag_ms} must not"
                f" exceed {MAX_COMPACTION_LAG_MS!r}={cfg.max_compaction_lag_ms}"
            )
        return cfg
