"""`load_settings`: defaults < TOML file < SILT_* environment < flags, with origins."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import AgentConfig
from compactor import CompactorConfig
from fileformat import Compression
from planner import PlannerConfig
from settings import SettingError
from settings.load import SECTIONS, Origin, Source, load_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "silt.toml"
    path.write_text(text)
    return path


def test_defaults_without_sources() -> None:
    s = load_settings(env={})
    assert (s.agent, s.compactor, s.planner) == (AgentConfig(), CompactorConfig(),
                                                 PlannerConfig())
    assert s.store.url == "file://./silt-data/objects"
    assert s.metadata.url == "sqlite:///./silt-data/metadata.db"
    assert s.origins == {}
    values = s.values()
    assert {v.key.split(".")[0] for v in values} == set(SECTIONS)
    assert all(v.origin == Origin(Source.DEFAULT) for v in values)


def test_precedence_default_file_env_flag(tmp_path: Path) -> None:
    path = write(tmp_path, """
[agent]
linger.ms = 100
flush.bytes = 1024
max.block.ms = 5
buffer.memory = 4096
""")
    env = {"SILT_AGENT_FLUSH_BYTES": "2048", "SILT_AGENT_MAX_BLOCK_MS": "6"}
    s = load_settings(path, env, {"agent.max.block.ms": 7})
    assert s.agent == AgentConfig(linger_ms=100, flush_bytes=2048, buffer_memory=4096,
                                  max_block_ms=7)
    assert s.origin("agent.linger.ms") == Origin(Source.FILE, str(path))
    assert s.origin("agent.flush.bytes") == Origin(Source.ENV, "SILT_AGENT_FLUSH_BYTES")
    assert s.origin("agent.max.block.ms") == Origin(Source.FLAG)
    assert s.origin("agent.compression.type") == Origin(Source.DEFAULT)
    shown = {v.key: (v.value, str(v.origin)) for v in s.values()}
    assert shown["agent.linger.ms"] == (100, f"file {path}")
    assert shown["agent.flush.bytes"] == (2048, "env SILT_AGENT_FLUSH_BYTES")
    assert shown["agent.max.block.ms"] == (7, "flag")
    assert shown["agent.compression.type"] == (Compression.NONE, "default")


def test_store_and_metadata_keep_their_env_names(tmp_path: Path) -> None:
    path = write(tmp_path, '[store]\nurl = "memory://file"\n[metadata]\n'
                           'url = "sqlite:///file.db"\n')
    env = {"SILT_STORE": "s3://bucket/prefix", "SILT_METADATA": "postgresql://u@h/db"}
    s = load_settings(path, env)
    assert (s.store.url, s.metadata.url) == ("s3://bucket/prefix", "postgresql://u@h/db")
    assert s.origin("store.url") == Origin(Source.ENV, "SILT_STORE")
    assert s.origin("metadata.url") == Origin(Source.ENV, "SILT_METADATA")
    s = load_settings(path, {})
    assert (s.store.url, s.metadata.url) == ("memory://file", "sqlite:///file.db")
    s = load_settings(path, env, {"store.url": "file:///x"})
    assert s.store.url == "file:///x" and s.origin("store.url").source is Source.FLAG


def test_compactor_plans_with_the_planner_section(tmp_path: Path) -> None:
    path = write(tmp_path, "[planner]\nl0.trigger.files = 4\n[compactor]\nlease.ms = 9000\n")
    s = load_settings(path, {"SILT_PLANNER_LEVEL_MAX_AGE_MS": "60000"})
    assert s.compactor.planner is s.planner
    assert (s.planner.l0_trigger_files, s.planner.level_max_age_ms) == (4, 60_000)
    assert s.compactor.lease_ms == 9000


def test_toml_types(tmp_path: Path) -> None:
    path = write(tmp_path, """
[agent]
"linger.ms" = 0                 # a quoted key is the same key
compression.type = "gzip"       # a choice by name
[compactor.poll.interval]
s = 2                           # a nested table is too; an integer for a number is fine
[planner]
level.max.age.ms = "never"      # None
""")
    s = load_settings(path, {})
    assert (s.agent.linger_ms, s.agent.compression) == (0, Compression.GZIP)
    assert s.compactor.poll_interval_s == 2
    assert s.planner.level_max_age_ms is None
    s = load_settings(write(tmp_path, "[compactor]\npoll.interval.s = 0.25\n"), {})
    assert s.compactor.poll_interval_s == 0.25


@pytest.mark.parametrize(("line", "allowed"), [
    ("linger.ms = true", "an integer >= 0"),
    ("linger.ms = 1.5", "an integer >= 0"),
    ("linger.ms = [1]", "an integer >= 0"),
    ('linger.ms = "soon"', "an integer >= 0"),
    ("linger.ms = -1", "an integer >= 0"),
    ('compression.type = "brotli"', "one of none, gzip, snappy, lz4, zstd"),
    ("compression.type = 4", "one of none, gzip, snappy, lz4, zstd"),
])
def test_bad_file_values(tmp_path: Path, line: str, allowed: str) -> None:
    path = write(tmp_path, f"[agent]\n{line}\n")
    with pytest.raises(SettingError) as err:
        load_settings(path, {})
    msg = str(err.value)
    key = line.split(" = ")[0]
    assert msg.startswith(f"invalid setting agent.{key}=") and msg.endswith(allowed)
    assert f"(from file {path})" in msg and "\n" not in msg


def test_a_shadowed_bad_value_is_still_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "[agent]\nlinger.ms = -1\n")
    with pytest.raises(SettingError, match=r"agent\.linger\.ms=-1 \(from file"):
        load_settings(path, {"SILT_AGENT_LINGER_MS": "5"}, {"agent.linger.ms": 6})


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(SettingError) as err:
        load_settings(None, {"SILT_COMPACTOR_LEASE_MS": "0"})
    assert str(err.value) == ("invalid setting compactor.lease.ms=0 (from env"
                              " SILT_COMPACTOR_LEASE_MS): must be an integer >= 1")


def test_unknown_keys_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(SettingError) as err:
        load_settings(write(tmp_path, "[agent]\nlinger.mss = 1\n"), {})
    msg = str(err.value)
    assert msg.startswith("unknown setting agent.linger.mss (from file")
    assert "linger.ms, flush.bytes, buffer.memory, max.block.ms, compression.type" in msg
    with pytest.raises(SettingError, match=r"unknown settings section 'agnet'.*: store, "
                                           r"metadata, agent, compactor, planner$"):
        load_settings(write(tmp_path, "[agnet]\nlinger.ms = 1\n"), {})
    with pytest.raises(SettingError, match="unknown settings section 'linger'"):
        load_settings(write(tmp_path, "linger = 1\n"), {})
    with pytest.raises(SettingError, match=r"unknown setting SILT_PLANNER_MAX_LEVELS \(env\);"
                                           r" known variables of planner: .*_MAX_LEVEL"):
        load_settings(None, {"SILT_PLANNER_MAX_LEVELS": "3"})
    with pytest.raises(SettingError, match=r"unknown setting SILT_STORE_URL.*: SILT_STORE,"
                                           r" SILT_STORE_RETRY_ATTEMPTS,"):
        load_settings(None, {"SILT_STORE_URL": "memory://"})
    with pytest.raises(SettingError, match=r"unknown setting agent\.linger \(from flag\)"):
        load_settings(None, {}, {"agent.linger": 1})
    with pytest.raises(SettingError, match=r"unknown setting spark\.master"):
        load_settings(None, {}, {"spark.master": "local"})


def test_other_silt_variables_are_left_alone() -> None:
    env = {"SILT_TEST_POSTGRES_URL": "x", "SILT_REQUIRE_SERVERS": "1", "SILT_SPARK_CRASH_ONCE": "1"}
    assert load_settings(None, env).origins == {}


def test_bad_toml_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[agent]\nlinger.ms = = 1\n")
    with pytest.raises(SettingError) as err:
        load_settings(path, {})
    assert str(err.value).startswith(f"invalid settings file {path}: ")
    assert "\n" not in str(err.value)


def test_cross_setting_check_after_all_sources(tmp_path: Path) -> None:
    path = write(tmp_path, "[agent]\nbuffer.memory = 4096\n")
    assert load_settings(path, {"SILT_AGENT_FLUSH_BYTES": "4096"}).agent.buffer_memory == 4096
    with pytest.raises(SettingError, match=r"agent\.buffer\.memory=4096: .*flush\.bytes"):
        load_settings(path, {"SILT_AGENT_FLUSH_BYTES": "4097"})


def test_settings_page_example_loads(tmp_path: Path) -> None:
    """docs/settings.md's example file loads (its reference is tests/reference/'s)."""
    page = (Path(__file__).parents[2] / "docs" / "settings.md").read_text()
    example = page[page.index("```toml\n") + 8:page.index("```\n", page.index("```toml"))]
    s = load_settings(write(tmp_path, example), {})
    assert s.store.url == "s3://my-bucket/silt" and s.agent.compression == Compression.ZSTD
