"""The `store.retry.*` settings: loaded from every source, checked, and turned into the one
retry policy the `silt` commands open their store with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.context import Context
from cli.main import cli
from objectstore import DEFAULT_RETRY, CountingStore, RetryingStore, RetryPolicy, StoreConfig
from settings import SettingError
from settings.load import load_settings


def test_defaults_are_the_default_policy() -> None:
    assert RetryPolicy.of(StoreConfig()) == DEFAULT_RETRY
    assert RetryPolicy(attempts=6, base_delay_s=0.05, max_delay_s=2.0,
                       throttle_delay_s=0.25) == DEFAULT_RETRY


def test_loaded_from_file_env_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "silt.toml"
    path.write_text("[store]\nretry.attempts = 9\nretry.backoff.max.ms = 5000\n")
    s = load_settings(path, {"SILT_STORE_RETRY_BACKOFF_MS": "20",
                             "SILT_STORE_RETRY_THROTTLE_BACKOFF_MS": "1000"})
    assert RetryPolicy.of(s.store) == RetryPolicy(attempts=9, base_delay_s=0.02,
                                                  max_delay_s=5.0, throttle_delay_s=1.0)
    assert str(s.origin("store.retry.backoff.ms")) == "env SILT_STORE_RETRY_BACKOFF_MS"
    with pytest.raises(SettingError, match=r"^invalid setting store\.retry\.attempts=many"
                                           r" \(from env SILT_STORE_RETRY_ATTEMPTS\)"):
        load_settings(None, {"SILT_STORE_RETRY_ATTEMPTS": "many"})
    with pytest.raises(SettingError, match=r"store\.retry\.backoff\.max\.ms=10: must be an"
                                           r" integer >= retry\.backoff\.ms \(20\)$"):
        load_settings(None, {"SILT_STORE_RETRY_BACKOFF_MS": "20",
                             "SILT_STORE_RETRY_BACKOFF_MAX_MS": "10"})


def test_the_cli_opens_its_store_with_the_settings_policy(tmp_path: Path) -> None:
    env = {"SILT_STORE": f"file://{tmp_path}/objects",
           "SILT_METADATA": f"sqlite:///{tmp_path}/md.db", "SILT_STORE_RETRY_ATTEMPTS": "3"}
    result = CliRunner().invoke(cli, ["config", "show", "--json"], env=env)
    assert result.exit_code == 0, result.stderr
    shown = {key: row["value"] for key, row in json.loads(result.stdout).items()}
    assert shown["store.retry.attempts"] == 3 and shown["store.retry.throttle.backoff.ms"] == 250

    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        ctx = Context(None)
        ctx.open(create=True)  # the store and its metadata, opened together
        store = ctx.store
        ctx.close()
    assert isinstance(store, CountingStore)  # counting(retrying(backend))
    assert isinstance(store.inner, RetryingStore) and store.inner.policy.attempts == 3
