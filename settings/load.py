"""Loading the effective settings: defaults < TOML file < `SILT_*` environment < flags.

A settings file has one table per section (`store`, `metadata`, `agent`, `compactor`,
`planner`) holding that section's dotted keys, quoted or as nested tables, which TOML
treats alike:

    [agent]
    linger.ms = 100              # same as "linger.ms" = 100
    compression.type = "zstd"

The environment names are `SILT_<SECTION>_<KEY>` (`SILT_AGENT_LINGER_MS`), except the store
and metadata URLs, which keep their names `SILT_STORE` and `SILT_METADATA`. Flags are
passed as `overrides`, by full key (`agent.linger.ms`). Unknown sections and keys are
rejected (in the environment: unknown names under a section's `SILT_<SECTION>_` prefix),
as are values a section does not allow, with a one-line SettingError. The result records
where each value came from, for `silt config show`.

This module imports the components (each declares its own section); `settings`'s core does
not, so components can import it.
"""

from __future__ import annotations

import enum
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from agent.config import AgentConfig
from compactor.config import CompactorConfig
from metadata.config import MetadataConfig
from objectstore.config import StoreConfig
from planner import PlannerConfig

from .core import Section, Setting, declared
from .errors import SettingError

ENV_PREFIX = "SILT_"
S = TypeVar("S", bound=Section)

# Section name -> its class, in the order settings are shown.
SECTIONS: Mapping[str, type[Section]] = {
    cls.SECTION: cls
    for cls in (StoreConfig, MetadataConfig, AgentConfig, CompactorConfig, PlannerConfig)
}


class Source(enum.StrEnum):
    """Where a setting's value came from, lowest precedence first."""

    DEFAULT = "default"
    FILE = "file"
    ENV = "env"
    FLAG = "flag"


@dataclass(frozen=True, slots=True)
class Origin:
    """A value's source and, for file and env, the file's path or the variable's name."""

    source: Source
    name: str = ""

    def __str__(self) -> str:
        return f"{self.source} {self.name}" if self.name else str(self.source)


DEFAULT_ORIGIN = Origin(Source.DEFAULT)


@dataclass(frozen=True, slots=True)
class Value:
    """One effective setting: full key (`agent.linger.ms`), typed value, origin."""

    key: str
    value: object
    origin: Origin


@dataclass(frozen=True, slots=True)
class Settings:
    """The effective settings of every component, and where each non-default came from.

    `compactor.planner` is `planner` (the compactor plans with the planner section).
    """

    store: StoreConfig
    metadata: MetadataConfig
    agent: AgentConfig
    compactor: CompactorConfig
    planner: PlannerConfig
    origins: Mapping[str, Origin]  # full key -> origin; absent keys are defaults

    def origin(self, key: str) -> Origin:
        """Where the value of full key `key` (`agent.linger.ms`) came from."""
        return self.origins.get(key, DEFAULT_ORIGIN)

    def values(self) -> list[Value]:
        """Every setting of every section, in section and declaration order."""
        out = []
        for name in SECTIONS:
            section: Section = getattr(self, name)
            for key, value in section.items():
                full = f"{name}.{key}"
                out.append(Value(full, value, self.origin(full)))
        return out


def env_name(section: type[Section], spec: Setting) -> str:
    """The environment variable of a setting: its own, or SILT_<SECTION>_<KEY>."""
    if spec.env is not None:
        return spec.env
    return f"{ENV_PREFIX}{section.SECTION}_{spec.key}".upper().replace(".", "_")


class _Values:
    """Typed values by section and attribute, and the origin of each full key."""

    def __init__(self) -> None:
        self.by_section: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
        self.origins: dict[str, Origin] = {}

    def set(self, name: str, key: str, raw: object, origin: Origin) -> None:
        """Check `raw` now, whatever comes later, so a bad value is never silently shadowed."""
        attr, value = SECTIONS[name].convert(key, raw, str(origin))
        self.by_section[name][attr] = value
        self.origins[f"{name}.{key}"] = origin


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, object]:
    """Nested TOML tables to dotted keys: {"linger": {"ms": 1}} -> {"linger.ms": 1}."""
    out: dict[str, object] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _read_file(path: Path, values: _Values) -> None:
    origin = Origin(Source.FILE, str(path))
    with path.open("rb") as f:
        try:
            doc = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise SettingError(f"invalid settings file {path}: {exc}") from None
    for name, table in doc.items():
        if name not in SECTIONS or not isinstance(table, dict):
            raise SettingError(f"unknown settings section {name!r} in {path}; known sections:"
                               f" {', '.join(SECTIONS)}")
        for key, value in _flatten(table).items():
            values.set(name, key, value, origin)


def _read_env(env: Mapping[str, str], values: _Values) -> None:
    for name, cls in SECTIONS.items():
        names = {env_name(cls, spec): key for key, (_, spec) in declared(cls).items()}
        prefix = f"{ENV_PREFIX}{name.upper()}_"
        for var, value in env.items():
            if var in names:
                values.set(name, names[var], value, Origin(Source.ENV, var))
            elif var.startswith(prefix):
                raise SettingError(f"unknown setting {var} (env); known variables of {name}:"
                                   f" {', '.join(names)}")


def _split(full_key: str) -> tuple[str, str]:
    name, _, key = full_key.partition(".")
    if name not in SECTIONS:
        raise SettingError(f"unknown setting {full_key}; keys start with a section:"
                           f" {', '.join(SECTIONS)}")
    return name, key


def load_settings(path: str | Path | None = None, env: Mapping[str, str] = os.environ,
                  overrides: Mapping[str, object] = MappingProxyType({})) -> Settings:
    """The effective settings: each section's defaults, then the TOML file at `path`, then
    `env`, then `overrides` (flags, by full key). Raises SettingError (one line: the key,
    where it came from, what is allowed) for unknown keys and values not allowed."""
    values = _Values()
    if path is not None:
        _read_file(Path(path), values)
    _read_env(env, values)
    for full_key, value in overrides.items():
        name, key = _split(full_key)
        values.set(name, key, value, Origin(Source.FLAG))

    def build(cls: type[S], **fields: object) -> S:
        return cls(**values.by_section[cls.SECTION], **fields)

    planner = build(PlannerConfig)
    return Settings(
        store=build(StoreConfig), metadata=build(MetadataConfig), agent=build(AgentConfig),
        compactor=build(CompactorConfig, planner=planner), planner=planner,
        origins=values.origins,
    )
