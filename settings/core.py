"""Declaring settings: data, checked when built.

A section is a frozen dataclass deriving from `Section`; each of its settings is a field
made by `integer`, `number`, `choice`, `text` or `setting`, which carries the dotted key
(Kafka-style, e.g. `linger.ms`), the check, the allowed values as text and how to read the
value from text (environment variables, topic config maps). `Section.__post_init__` checks
every declared field, so no component can hold an invalid setting whoever built it. This
module does no I/O; loading files and the environment is `settings.load`'s job.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from .errors import SettingError

T = TypeVar("T")

SETTING = "silt.setting"  # dataclass field metadata key holding the field's `Setting`


@dataclass(frozen=True, slots=True)
class Setting:
    """How one setting is named, checked and read from text."""

    key: str  # dotted name within its section, e.g. "linger.ms"
    allowed: str  # completes "must be ...", e.g. "an integer >= 0"
    check: Callable[[Any], bool]  # is this typed value allowed?
    parse: Callable[[str], Any]  # text -> typed value; raises ValueError if it cannot
    env: str | None = None  # environment name when not SILT_<SECTION>_<KEY>
    doc: str = ""  # one line for the settings reference (docs/settings.md)

    def convert(self, raw: object) -> Any:
        """The typed value of `raw` (text is parsed first); ValueError if it is not allowed."""
        value = self.parse(raw) if isinstance(raw, str) else raw
        if not self.check(value):
            raise ValueError(self.allowed)
        return value


def setting(key: str, default: T, *, allowed: str, check: Callable[[Any], bool],
            parse: Callable[[str], Any], env: str | None = None, doc: str = "") -> T:
    """A dataclass field declaring setting `key` with its default, check and parser (`doc`:
    one line for the generated settings reference)."""
    spec = Setting(key, allowed, check, parse, env, doc)
    if not spec.check(default):
        raise AssertionError(f"default of {key} is not allowed: {default!r}")
    return dataclasses.field(default=default, metadata={SETTING: spec})


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _range_text(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" in [{lo}, {hi}]"
    if lo is not None:
        return f" >= {lo}"
    return f" <= {hi}" if hi is not None else ""


def _within(value: float, lo: float | None, hi: float | None) -> bool:
    return (lo is None or lo <= value) and (hi is None or value <= hi)


def _parse_int(text: str) -> int:
    return int(text.strip(), 10)


def integer(key: str, default: int, *, lo: int | None = None, hi: int | None = None,
            env: str | None = None, doc: str = "") -> int:
    """An integer setting in [lo, hi] (either bound optional)."""
    return setting(key, default, allowed="an integer" + _range_text(lo, hi),
                   check=lambda v: _is_int(v) and _within(v, lo, hi), parse=_parse_int, env=env,
                   doc=doc)


NEVER = "never"  # the text of None for optional integers


def optional_integer(key: str, default: int | None, *, lo: int | None = None,
                     env: str | None = None, doc: str = "") -> int | None:
    """An integer setting >= lo, or None written as "never" (or empty text)."""

    def parse(text: str) -> int | None:
        return None if text.strip().lower() in ("", NEVER) else _parse_int(text)

    return setting(key, default, allowed=f"an integer{_range_text(lo, None)} or {NEVER!r}",
                   check=lambda v: v is None or (_is_int(v) and _within(v, lo, None)),
                   parse=parse, env=env, doc=doc)


def number(key: str, default: float, *, lo: float | None = None, hi: float | None = None,
           above: float | None = None, env: str | None = None, doc: str = "") -> float:
    """A finite number in [lo, hi], or > `above`."""
    bounds = f" > {above}" if above is not None else _range_text(lo, hi)

    def check(v: object) -> bool:
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            return False
        return _within(v, lo, hi) and (above is None or v > above)

    return setting(key, default, allowed="a number" + bounds, check=check,
                   parse=lambda text: float(text.strip()), env=env, doc=doc)


def choice(key: str, default: T, options: Mapping[str, T], *, env: str | None = None,
           doc: str = "") -> T:
    """One of `options` (name -> value), read from text by name (case-insensitive)."""
    values = list(options.values())

    def parse(text: str) -> T:
        try:
            return options[text.strip().lower()]
        except KeyError:
            raise ValueError(text) from None

    return setting(key, default, allowed="one of " + ", ".join(options),
                   check=lambda v: any(type(v) is type(o) and v == o for o in values),
                   parse=parse, env=env, doc=doc)


def text(key: str, default: str, *, allowed: str, check: Callable[[str], bool],
         env: str | None = None, doc: str = "") -> str:
    """A string setting (read from text as it is, stripped)."""
    return setting(key, default, allowed=allowed,
                   check=lambda v: isinstance(v, str) and check(v),
                   parse=lambda t: t.strip(), env=env, doc=doc)


def parse_host_port(value: str) -> tuple[str, int] | None:
    """("host", port) from "HOST:PORT" ("[::1]:9092" for IPv6), or None if malformed: the
    value of listener settings (`agent.listeners`, `metrics.listeners`)."""
    host, sep, port = value.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        return None
    return host, int(port)


def show(value: object) -> str:
    """A setting value as written in files and messages (`zstd`, `250`, `never`, `false`)."""
    if value is None:
        return NEVER
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, enum.Enum):
        return value.name.lower()
    return str(value)


_DECLARED: dict[type, Mapping[str, tuple[str, Setting]]] = {}


def declared(cls: type) -> Mapping[str, tuple[str, Setting]]:
    """The settings `cls` declares: key -> (attribute, Setting), in declaration order."""
    found = _DECLARED.get(cls)
    if found is None:
        found = _DECLARED[cls] = {f.metadata[SETTING].key: (f.name, f.metadata[SETTING])
                                  for f in dataclasses.fields(cls) if SETTING in f.metadata}
    return found


class Section:
    """Base of a settings section: a frozen dataclass whose declared settings are checked
    when it is built. `SECTION` names it in keys (`agent.linger.ms`) and messages."""

    __slots__ = ()
    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for attr, spec in declared(type(self)).values():
            value = getattr(self, attr)
            if not spec.check(value):
                raise self.invalid(spec.key, value, spec.allowed)
        self.check_across()

    def check_across(self) -> None:
        """Checks involving several settings; raise `self.invalid(...)`. None by default."""

    @classmethod
    def invalid(cls, key: str, value: object, allowed: str, where: str = "") -> SettingError:
        """The error for a value of `key` that is not allowed (`where`: its source)."""
        source = f" (from {where})" if where else ""
        return SettingError(
            f"invalid setting {cls.SECTION}.{key}={show(value)}{source}: must be {allowed}")

    @classmethod
    def unknown(cls, key: str, where: str = "") -> SettingError:
        """The error for a key this section does not declare."""
        source = f" (from {where})" if where else ""
        return SettingError(f"unknown setting {cls.SECTION}.{key}{source}; known keys of"
                            f" {cls.SECTION}: {', '.join(declared(cls))}")

    @classmethod
    def convert(cls, key: str, raw: object, where: str = "") -> tuple[str, object]:
        """(attribute, typed value) of setting `key` given `raw` (text is parsed); unknown
        keys and values not allowed raise this section's errors (`where`: the source)."""
        specs = declared(cls)
        if key not in specs:
            raise cls.unknown(key, where)
        attr, spec = specs[key]
        try:
            return attr, spec.convert(raw)
        except (ValueError, TypeError):
            raise cls.invalid(key, raw, spec.allowed, where) from None

    @classmethod
    def from_map(cls, values: Mapping[str, object], **fields: object) -> Self:
        """Build from setting keys (`linger.ms`) and raw values (text is parsed); `fields`:
        other attributes, passed as they are."""
        kwargs = dict(fields)
        for key, raw in values.items():
            attr, value = cls.convert(key, raw)
            kwargs[attr] = value
        return cls(**kwargs)

    def items(self) -> Iterator[tuple[str, object]]:
        """(key, value) of every declared setting, in declaration order."""
        for key, (attr, _) in declared(type(self)).items():
            yield key, getattr(self, attr)
