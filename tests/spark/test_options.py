"""format("silt")'s store and metadata default to the settings layer's URLs: the environment
(checked, one line naming the variable), else the defaults, read without the settings loader."""

from __future__ import annotations

import pytest

from settings import SettingError
from spark.datasource import Options


def test_urls_from_the_environment_or_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SILT_STORE", raising=False)
    monkeypatch.delenv("SILT_METADATA", raising=False)
    default = Options.parse({"topic": "t"})
    assert default.store.url == "file://./silt-data/objects"
    assert default.metadata == "sqlite:///./silt-data/metadata.db"
    monkeypatch.setenv("SILT_STORE", "memory://here")
    monkeypatch.setenv("SILT_AGENT_LINGER_MS", "not read by format('silt')")
    assert Options.parse({"topic": "t"}).store.url == "memory://here"
    given = Options.parse({"topic": "t", "store": "memory://given", "metadata": "sqlite://"})
    assert (given.store.url, given.metadata) == ("memory://given", "sqlite://")
    monkeypatch.setenv("SILT_METADATA", "bogus://x")
    with pytest.raises(SettingError, match=r"metadata\.url=bogus://x \(from env SILT_METADATA\)"):
        Options.parse({"topic": "t"})
