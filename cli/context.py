"""What every `silt` command shares: the `Context` (settings, stores, global flags), the one
decorator that turns known errors into one line and exit 1, and the helpers of flags.

Settings come from `settings.load`: defaults < `--config FILE` (TOML) < `SILT_*` variables
< flags. Errors are one line on stderr with exit 1; usage errors (including flags a command
would ignore) exit 2 (click's convention).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, ParamSpec, TypeVar

import click
import sqlalchemy.exc as sa_exc

from acl import AclError
from agent import AgentError
from fileformat.errors import FormatError
from metadata import MetadataStore
from metadata.errors import MetadataError
from objectstore import ObjectStore
from objectstore.config import URL
from objectstore.errors import ObjectStoreError
from settings import Section, declared, show
from settings.load import Settings, load_settings

from .cluster import open_cluster
from .errors import CommandFailed

MIB = 1024 * 1024

KNOWN_ERRORS: tuple[type[BaseException], ...] = (
    CommandFailed,
    AclError,
    AgentError,
    MetadataError,
    ObjectStoreError,
    FormatError,
    FileNotFoundError,
    PermissionError,
    ValueError,
)

P = ParamSpec("P")
R = TypeVar("R")


def one_line_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn the project's known errors into `silt: <message>` and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except KNOWN_ERRORS as exc:
            own = isinstance(exc, CommandFailed) and exc.__cause__ is None  # nothing to trace
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            _fail(message, trace=not own)
        except sa_exc.OperationalError as exc:
            # The database went away mid-command (opening it is MetadataUnavailableError).
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
            _fail(f"metadata database failed: {reason}", trace=True)

    return wrapper


def _fail(message: str, *, trace: bool) -> NoReturn:
    """`silt: <message>` on stderr (the traceback too with --verbose), exit code 1."""
    obj = click.get_current_context(silent=True)
    if trace and obj is not None and getattr(obj.find_object(Context), "verbose", False):
        traceback.print_exc()
    click.echo(f"silt: {message}", err=True)
    sys.exit(1)


@dataclass
class Context:
    """The settings file and global flags; settings loaded, stores opened, lazily."""

    config_path: Path | None
    flags: dict[str, object | None] = field(default_factory=dict)  # full key -> global flag
    verbose: bool = False
    _settings: Settings | None = None
    _store: ObjectStore | None = None
    _metadata: MetadataStore | None = None

    def load(self, flags: Mapping[str, object | None]) -> Settings:
        """The settings with a command's flags on top (None: the flag was not given); from
        then on `settings` too (the agent section's cross-checks need the command's flags:
        an advertised listener the environment names exists only in its --listen)."""
        given = {k: v for k, v in {**self.flags, **flags}.items() if v is not None}
        self._settings = load_settings(self.config_path, os.environ, given)
        return self._settings

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = self.load({})
        return self._settings

    @property
    def store_url(self) -> str:
        return self.settings.store.url

    @property
    def metadata_url(self) -> str:
        return self.settings.metadata.url

    def open(self, *, create: bool = False) -> None:
        """Open the store and the metadata, checked to belong together (cli/cluster.py);
        `create`: a write command's first call, creating what is missing."""
        if self._metadata is None:
            opened = open_cluster(self.settings, create=create)
            self._store, self._metadata = opened.store, opened.metadata

    @property
    def store(self) -> ObjectStore:
        self.open()
        assert self._store is not None
        return self._store

    @property
    def metadata(self) -> MetadataStore:
        self.open()
        assert self._metadata is not None
        return self._metadata

    def close(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    def global_args(self) -> list[str]:
        """The global options this command was given, for a child `silt` (`silt up`)."""
        args = ["--config", str(self.config_path)] if self.config_path is not None else []
        args += ["--verbose"] if self.verbose else []
        for flag, key in (("--store", f"store.{URL}"), ("--metadata", f"metadata.{URL}")):
            if self.flags.get(key) is not None:
                args += [flag, str(self.flags[key])]
        return args


pass_ctx = click.make_pass_decorator(Context)


def setting_default(section: type[Section], key: str, scale: int = 1, unit: str = "") -> str:
    """For --help: the setting a flag overrides and its default (divided by `scale`)."""
    value = getattr(section(), declared(section)[key][0])
    return f"{section.SECTION}.{key} = {show(value // scale if scale > 1 else value)}{unit}"


def parse_configs(pairs: tuple[str, ...], flag: str = "--config") -> dict[str, str]:
    """KEY=VALUE flags as a dict (a usage error names `flag`)."""
    configs: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint=flag)
        configs[key.strip()] = value.strip()
    return configs
