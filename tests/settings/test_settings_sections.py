"""Every section validates at construction, with one error type and one-line messages."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from agent import AgentConfig
from compactor import CompactorConfig
from fileformat import Compression
from metadata import TopicConfig
from metadata.config import MetadataConfig
from metadata.errors import InvalidConfigError, MetadataError
from objectstore import DEFAULT_STORE_URL, StoreConfig
from planner import PlannerConfig
from planner.errors import InvalidPlannerConfigError
from settings import Section, SettingError, declared
from settings.load import SECTIONS

ALL_SECTIONS: list[type[Section]] = [*SECTIONS.values(), TopicConfig]

# (section, attribute, bad value, full key, what the message says is allowed)
BAD: list[tuple[type[Section], str, object, str, str]] = [
    (AgentConfig, "linger_ms", -1, "agent.linger.ms", "an integer >= 0"),
    (AgentConfig, "flush_bytes", 0, "agent.flush.bytes", "an integer >= 1"),
    (AgentConfig, "buffer_memory", 1024, "agent.buffer.memory", ">= flush.bytes"),
    (AgentConfig, "max_block_ms", -5, "agent.max.block.ms", "an integer >= 0"),
    (AgentConfig, "compression", "zstd", "agent.compression.type",
     "one of none, gzip, snappy, lz4, zstd"),
    (AgentConfig, "linger_ms", True, "agent.linger.ms", "an integer >= 0"),
    (AgentConfig, "linger_ms", 1.5, "agent.linger.ms", "an integer >= 0"),
    (CompactorConfig, "memory_budget", 0, "compactor.memory.budget", "an integer >= 1"),
    (CompactorConfig, "lease_ms", 0, "compactor.lease.ms", "an integer >= 1"),
    (CompactorConfig, "grace_ms", -1, "compactor.file.delete.delay.ms", "an integer >= 0"),
    (CompactorConfig, "poll_interval_s", 0.0, "compactor.poll.interval.s", "a number > 0"),
    (CompactorConfig, "poll_interval_s", float("nan"), "compactor.poll.interval.s",
     "a number > 0"),
    (CompactorConfig, "compression", Compression.LZ4, "compactor.compression.type",
     "one of producer, uncompressed, gzip, snappy, lz4, zstd, none"),
    (PlannerConfig, "l0_trigger_files", 0, "planner.l0.trigger.files", "an integer >= 1"),
    (PlannerConfig, "level_trigger_files", 1, "planner.level.trigger.files",
     "an integer >= 2"),
    (PlannerConfig, "level_max_age_ms", -1, "planner.level.max.age.ms",
     "an integer >= 0 or 'never'"),
    (PlannerConfig, "max_level", 0, "planner.max.level", "an integer >= 1"),
    (StoreConfig, "url", "nosuch://host/x", "store.url", "file:///path"),
    (StoreConfig, "retry_attempts", 0, "store.retry.attempts", "an integer in [1, 100]"),
    (StoreConfig, "retry_backoff_ms", -1, "store.retry.backoff.ms", "an integer >= 0"),
    (StoreConfig, "retry_backoff_max_ms", 10, "store.retry.backoff.max.ms",
     "an integer >= retry.backoff.ms (50)"),
    (StoreConfig, "retry_throttle_backoff_ms", -1, "store.retry.throttle.backoff.ms",
     "an integer >= 0"),
    (MetadataConfig, "url", "mysql://host/db", "metadata.url", "sqlite:///path"),
]


@pytest.mark.parametrize(("cls", "attr", "value", "key", "allowed"), BAD)
def test_bad_value_is_one_line_naming_key_and_allowed(
    cls: type[Section], attr: str, value: object, key: str, allowed: str
) -> None:
    with pytest.raises(SettingError) as err:
        cls(**{attr: value})
    msg = str(err.value)
    assert msg.startswith(f"invalid setting {key}=") and allowed in msg
    assert "\n" not in msg and not err.value.retriable


def test_one_message_shape() -> None:
    with pytest.raises(SettingError, match=r"^invalid setting agent\.linger\.ms=-1: must be an"
                                           r" integer >= 0$"):
        AgentConfig(linger_ms=-1)


def test_defaults_are_valid_and_declared_once() -> None:
    for cls in ALL_SECTIONS:
        default = cls()
        assert [k for k, _ in default.items()] == list(declared(cls))
    assert StoreConfig().url == DEFAULT_STORE_URL == "file://./silt-data/objects"
    assert MetadataConfig().url == "sqlite:///./silt-data/metadata.db"
    assert CompactorConfig().planner == PlannerConfig()


def test_keys_nest_in_toml() -> None:
    """TOML reads `linger.ms = 1` as nested tables, so no key may prefix another."""
    for cls in ALL_SECTIONS:
        keys = list(declared(cls))
        assert len(set(keys)) == len(keys)
        for a in keys:
            assert not any(b.startswith(a + ".") for b in keys), (cls, a)


def test_from_map_parses_text_and_rejects_unknown_keys() -> None:
    cfg = AgentConfig.from_map({"linger.ms": " 10 ", "compression.type": "ZSTD"})
    assert (cfg.linger_ms, cfg.compression) == (10, Compression.ZSTD)
    assert PlannerConfig.from_map({"level.max.age.ms": "never"}).level_max_age_ms is None
    assert PlannerConfig.from_map({"level.max.age.ms": ""}).level_max_age_ms is None
    assert PlannerConfig.from_map({"level.max.age.ms": "7"}).level_max_age_ms == 7
    with pytest.raises(SettingError) as err:
        CompactorConfig.from_map({"lease": 5})
    msg = str(err.value)
    assert msg.startswith("unknown setting compactor.lease;") and "\n" not in msg
    assert all(k in msg for k in declared(CompactorConfig))
    with pytest.raises(SettingError, match=r"compactor\.lease\.ms=soon: must be an integer"):
        CompactorConfig.from_map({"lease.ms": "soon"})


def test_cross_setting_check() -> None:
    assert AgentConfig(flush_bytes=1024, buffer_memory=1024).buffer_memory == 1024
    with pytest.raises(SettingError, match=r"agent\.buffer\.memory=1023: .*flush\.bytes"):
        AgentConfig(flush_bytes=1024, buffer_memory=1023)


def test_component_errors_are_setting_errors() -> None:
    assert issubclass(InvalidPlannerConfigError, SettingError)
    assert issubclass(InvalidConfigError, SettingError)
    assert issubclass(InvalidConfigError, MetadataError)
    with pytest.raises(InvalidPlannerConfigError):
        PlannerConfig(max_level=0)
    with pytest.raises(InvalidConfigError, match=r"for configuration retention\.ms:"):
        TopicConfig(retention_ms=-2)


def test_sections_are_frozen_and_replace_revalidates() -> None:
    cfg = AgentConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.linger_ms = 5  # type: ignore[misc]
    with pytest.raises(SettingError):
        dataclasses.replace(cfg, linger_ms=-1)


def test_core_and_planner_import_no_io_packages() -> None:
    """The settings core and the (pure) planner load neither the loader nor any I/O package."""
    code = ("import sys, planner, settings; "
            "bad = [m for m in ('settings.load', 'metadata', 'objectstore', 'agent', "
            "'compactor', 'sqlalchemy', 'tomllib') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("listeners", "advertised"), [
    ("0.0.0.0:9092", ""), ("[::]:9092", ""), ("127.0.0.1:9092", "0.0.0.0:9092"),
    ("0.0.0.0:9092", "[::]:19092"),
])
def test_a_wildcard_address_is_never_advertised(listeners: str, advertised: str) -> None:
    """Metadata would send clients to 0.0.0.0, and agents on different hosts would all
    register as "0.0.0.0:9092" (one broker id): as Kafka, advertised.listeners must name a
    reachable host when the agent listens on every interface."""
    with pytest.raises(SettingError, match=r"^invalid setting agent\.advertised\.listeners=.*"
                                           r"not a wildcard address"):
        AgentConfig(listeners=listeners, advertised_listeners=advertised)


def test_listening_on_every_interface_with_an_advertised_host() -> None:
    config = AgentConfig(listeners="0.0.0.0:9092", advertised_listeners="agent-1.internal:9092")
    assert (config.listeners, config.advertised_listeners) == (
        "0.0.0.0:9092", "agent-1.internal:9092")
