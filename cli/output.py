"""Where a command's result goes: text for people or one JSON document for scripts, chosen
once from the command's `--json` flag (as pyiceberg's `cli/output.py`), so that no command
branches on the format.

A command builds its result as a JSON-ready document and hands it to `Output.result` with
the function that lays that document out as text lines: `JsonOutput` prints the document,
`TextOutput` the lines. Notes on stderr (a dry run, a progress bar) are not results: they
show in both.
"""

from __future__ import annotations

import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click

D = TypeVar("D")
F = TypeVar("F", bound=Callable[..., Any])


class Output(ABC):
    """A command's result, as text or as JSON."""

    json = False

    @abstractmethod
    def result(self, document: D, text: Callable[[D], Iterable[str]]) -> None:
        """Print `document` (JSON-ready), laid out as `text(document)` for a terminal."""


class TextOutput(Output):
    """Each of the text lines, as they are."""

    def result(self, document: D, text: Callable[[D], Iterable[str]]) -> None:
        for line in text(document):
            click.echo(line)


class JsonOutput(Output):
    """The document as JSON, one line (indented if `indent`)."""

    json = True

    def __init__(self, indent: int | None = None) -> None:
        self.indent = indent

    def result(self, document: D, text: Callable[[D], Iterable[str]]) -> None:
        click.echo(json.dumps(document, indent=self.indent))


def json_option(indent: int | None = None) -> Callable[[F], F]:
    """The `--json` flag, passed to the command as `out`: the `Output` it chose."""

    def choose(ctx: click.Context, param: click.Parameter, given: bool) -> Output:
        return JsonOutput(indent) if given else TextOutput()

    return click.option("--json", "out", is_flag=True, callback=choose)


def shown(value: object) -> str:
    """A table cell: None as `-`."""
    return "-" if value is None else str(value)


def columns(rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Rows of cells as left-aligned columns two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            .rstrip() for row in rows]


def hide_password(value: str) -> str:
    """A URL with its password (if any) shown as ***: metadata URLs may carry one."""
    try:
        parts = urlsplit(value)
        if parts.password is None:
            return value
    except ValueError:
        return value
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def interactive() -> bool:
    """Whether stderr is a terminal (progress bars show only there)."""
    return sys.stderr.isatty()


@contextmanager
def progress(description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr when it is a terminal (stdout may be redirected: the
    bar never mixes with the output); silent when stderr is piped."""
    if not interactive():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
