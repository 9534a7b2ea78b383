"""Topic config parsing and validation (pure, no database)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fileformat import Compression
from metadata import TopicConfig
from metadata.errors import InvalidConfigError
from metadata.topicconfig import (
    DEFAULTS,
    DESCRIPTIONS,
    IGNORED,
    KNOWN_KEYS,
    LONG_MAX,
    ignored_table,
    validate_configs,
)


def test_defaults_match_kafka() -> None:
    cfg = TopicConfig.from_map({})
    assert cfg == TopicConfig()
    assert cfg.cleanup_policy == "delete" and cfg.deletes and not cfg.compacted
    assert cfg.retention_ms == 604_800_000
    assert cfg.retention_bytes == -1
    assert cfg.delete_retention_ms == 86_400_000
    assert cfg.min_cleanable_dirty_ratio == 0.5
    assert cfg.min_compaction_lag_ms == 0
    assert cfg.max_compaction_lag_ms == LONG_MAX
    assert cfg.max_message_bytes == 1_048_588
    assert cfg.segment_bytes == 1_073_741_824
    assert cfg.compression_type == "producer" and cfg.rewrite_codec is None
    assert TopicConfig.from_map(DEFAULTS) == cfg


@pytest.mark.parametrize(
    ("policy", "compacted", "deletes"),
    [("delete", False, True), ("compact", True, False), ("compact,delete", True, True),
     ("delete,compact", True, True), (" compact , delete ", True, True)],
)
def test_policies(policy: str, compacted: bool, deletes: bool) -> None:
    stored = validate_configs({"cleanup.policy": policy})
    cfg = TopicConfig.from_map(stored)
    assert (cfg.compacted, cfg.deletes) == (compacted, deletes)
    assert stored["cleanup.policy"] in ("delete", "compact", "compact,delete")


def test_values_parse() -> None:
    cfg = TopicConfig.from_map(validate_configs({
        "retention.ms": "-1", "retention.bytes": "1000", "delete.retention.ms": "0",
        "min.cleanable.dirty.ratio": "0.1", "min.compaction.lag.ms": "5",
        "max.compaction.lag.ms": "10", "max.message.bytes": "1000", "segment.bytes": "14",
    }))
    assert (cfg.retention_ms, cfg.retention_bytes, cfg.delete_retention_ms) == (-1, 1000, 0)
    assert cfg.min_cleanable_dirty_ratio == 0.1
    assert (cfg.min_compaction_lag_ms, cfg.max_compaction_lag_ms) == (5, 10)
    assert (cfg.max_message_bytes, cfg.segment_bytes) == (1000, 14)


BAD = [
    ("cleanup.policy", ""), ("cleanup.policy", "compacted"), ("cleanup.policy", "delete,nope"),
    ("retention.ms", "-2"), ("retention.ms", "1.5"), ("retention.ms", "abc"),
    ("retention.ms", str(LONG_MAX + 1)), ("retention.bytes", "-5"),
    ("delete.retention.ms", "-1"), ("min.cleanable.dirty.ratio", "1.01"),
    ("min.cleanable.dirty.ratio", "-0.1"), ("min.cleanable.dirty.ratio", "nan"),
    ("min.cleanable.dirty.ratio", "x"), ("min.compaction.lag.ms", "-1"),
    ("max.compaction.lag.ms", "0"), ("max.message.bytes", "-1"),
    ("max.message.bytes", "2147483648"), ("segment.bytes", "13"), ("segment.bytes", ""),
    ("compression.type", "none"), ("compression.type", "brotli"), ("compression.type", ""),
]


@pytest.mark.parametrize(("key", "value"), BAD)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as err:
        validate_configs({key: value})
    msg = str(err.value)
    assert f"for configuration {key}: " in msg and "\n" not in msg
    assert not err.value.retriable


@pytest.mark.parametrize(("value", "codec"), [
    ("producer", None), ("uncompressed", Compression.NONE), ("gzip", Compression.GZIP),
    ("snappy", Compression.SNAPPY), ("lz4", Compression.LZ4), (" ZSTD ", Compression.ZSTD),
])
def test_compression_type_takes_kafkas_values(value: str, codec: Compression | None) -> None:
    stored = validate_configs({"compression.type": value})
    assert stored == {"compression.type": value.strip().lower()}
    assert TopicConfig.from_map(stored).rewrite_codec == codec


def test_unknown_key_lists_allowed_keys() -> None:
    msg = re.escape("unknown topic config 'retention.mss'")
    with pytest.raises(InvalidConfigError, match=msg) as err:
        validate_configs({"retention.mss": "1"})
    assert all(k in str(err.value) for k in KNOWN_KEYS)


def test_non_string_value_rejected() -> None:
    with pytest.raises(InvalidConfigError, match=re.escape("configuration retention.ms:")):
        validate_configs({"retention.ms": 5})  # type: ignore[dict-item]


def test_min_lag_above_max_lag_rejected() -> None:
    with pytest.raises(InvalidConfigError, match=re.escape("min.compaction.lag.ms")):
        validate_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


def test_every_kafka_topic_config_is_accepted_with_kafkas_defaults() -> None:
    kafka = {  # Kafka 4.0's LogConfig names and defaults (and three older ones)
        "cleanup.policy": "delete", "compression.type": "producer",
        "compression.gzip.level": "-1", "compression.lz4.level": "9",
        "compression.zstd.level": "3", "delete.retention.ms": "86400000",
        "file.delete.delay.ms": "60000", "flush.messages": str(LONG_MAX),
        "flush.ms": str(LONG_MAX), "follower.replication.throttled.replicas": "",
        "index.interval.bytes": "4096", "leader.replication.throttled.replicas": "",
        "local.retention.bytes": "-2", "local.retention.ms": "-2",
        "max.compaction.lag.ms": str(LONG_MAX), "max.message.bytes": "1048588",
        "message.downconversion.enable": "true", "message.format.version": "3.0-IV1",
        "message.timestamp.after.max.ms": str(LONG_MAX),
        "message.timestamp.before.max.ms": str(LONG_MAX),
        "message.timestamp.difference.max.ms": str(LONG_MAX),
        "message.timestamp.type": "CreateTime", "min.cleanable.dirty.ratio": "0.5",
        "min.compaction.lag.ms": "0", "min.insync.replicas": "1", "preallocate": "false",
        "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "false",
        "remote.storage.enable": "false", "retention.bytes": "-1", "retention.ms": "604800000",
        "segment.bytes": "1073741824", "segment.index.bytes": "10485760",
        "segment.jitter.ms": "0", "segment.ms": "604800000",
        "unclean.leader.election.enable": "false",
    }
    assert kafka == DEFAULTS
    assert validate_configs(kafka) == kafka


@pytest.mark.parametrize(("key", "value"), [
    ("segment.ms", "0"), ("segment.ms", "soon"), ("flush.ms", "-1"), ("flush.messages", "0"),
    ("segment.index.bytes", "3"), ("segment.bytes", "2147483648"), ("preallocate", "yes"),
    ("message.timestamp.type", "logappendtime"), ("message.timestamp.type", "NoTime"),
    ("compression.gzip.level", "0"), ("compression.lz4.level", "18"),
    ("compression.zstd.level", "23"), ("min.insync.replicas", "0"),
    ("local.retention.ms", "-3"), ("leader.replication.throttled.replicas", "a:b"),
    ("message.format.version", "latest"),
])
def test_kafka_topic_configs_are_checked_as_kafka_checks_them(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError,
                       match=re.escape(f"Invalid value {value} for configuration {key}: ")):
        validate_configs({key: value})


@pytest.mark.parametrize(("key", "value"), [
    ("segment.ms", "1"), ("flush.ms", "0"), ("preallocate", "TRUE"),
    ("unclean.leader.election.enable", " false "), ("compression.gzip.level", "9"),
    ("compression.zstd.level", "-131072"), ("leader.replication.throttled.replicas", "*"),
    ("follower.replication.throttled.replicas", "0:1,1:2"), ("local.retention.bytes", "-2"),
    ("message.timestamp.type", "LogAppendTime"), ("message.format.version", "2.8"),
])
def test_kafka_topic_configs_take_kafkas_values(key: str, value: str) -> None:
    assert key in validate_configs({key: value})


def test_ignored_configs_are_documented_in_operations_and_described() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    assert ignored_table() in docs
    assert all("Accepted and ignored here" in DESCRIPTIONS[k][1] for k in IGNORED)
    applied = set(KNOWN_KEYS) - set(IGNORED)
    assert not any("ignored" in DESCRIPTIONS[k][1] for k in applied)
    assert "message.timestamp.type" in applied and "segment.ms" in IGNORED
