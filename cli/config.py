"""`silt config show`: every setting's effective value and where it came from."""

from __future__ import annotations

import enum
from collections.abc import Iterator

import click

from settings import show
from settings.load import Origin

from .context import Context, one_line_errors, pass_ctx
from .output import Output, columns, hide_password, json_option


@click.group()
def config() -> None:
    """The effective settings."""


def _json_value(value: object) -> object:
    if isinstance(value, enum.Enum):
        return show(value)
    return hide_password(value) if isinstance(value, str) else value


def _origin_json(origin: Origin) -> dict[str, str | None]:
    return {"source": str(origin.source), "from": origin.name or None}


@config.command("show")
@json_option()
@pass_ctx
@one_line_errors
def config_show(ctx: Context, out: Output) -> None:
    """Print every setting's effective value and where it came from (default, file, env
    variable, flag), lowest precedence first: defaults < --config FILE < SILT_* < flags.
    Passwords in URLs are shown as ***."""
    values = ctx.settings.values()

    def text(_: object) -> Iterator[str]:
        rows = [["key", "value", "from"]]
        rows += [[v.key, hide_password(show(v.value)), str(v.origin)] for v in values]
        yield from columns(rows, indent="")

    out.result({v.key: {"value": _json_value(v.value), **_origin_json(v.origin)}
                for v in values}, text)
