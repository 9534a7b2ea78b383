"""One settings layer: every component's settings are frozen dataclasses (`Section`s)
checked when built, loadable from a TOML file and `SILT_*` variables with flags on top.

This package's core (declarations, `Section`, `SettingError`) is pure and imports no other
siltstream package, so every component can declare its section with it; `settings.load`
composes the sections (store, metadata, agent, compactor, planner) and reads the sources.
"""

from .core import (
    Section,
    Setting,
    choice,
    declared,
    integer,
    number,
    optional_integer,
    parse_host_port,
    setting,
    show,
    text,
)
from .errors import SettingError

__all__ = [
    "Section",
    "Setting",
    "SettingError",
    "choice",
    "declared",
    "integer",
    "number",
    "optional_integer",
    "parse_host_port",
    "setting",
    "show",
    "text",
]
