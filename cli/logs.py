"""Logging of the long-lived commands (`silt agent`, `silt compactor`, `silt up`): text
lines, or with `--log-format json` one JSON object per line: `time` (ISO 8601, UTC, ms),
`level`, `logger`, `message`, `exception` (the traceback, if any), and every field a call
passed as `extra` (`log.info("...", extra={"job": report.as_dict()})`)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import click

TEXT, JSON = "text", "json"
FORMATS = (TEXT, JSON)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (values JSON cannot hold become strings)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, default=str)


def configure(fmt: str, level: int = logging.INFO) -> None:
    """Send the root logger's records to stderr in `fmt` (`text` or `json`), at `level`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == JSON else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


log_format_option = click.option(
    "--log-format", type=click.Choice(FORMATS), default=TEXT, show_default=True,
    help="Log lines as text, or one JSON object per line (time, level, logger, message,"
         " extra fields).")


class _Quiet(logging.Filter):
    """Without --verbose: no tracebacks, and no ERROR records of `reported` loggers (their
    errors also reach the caller, a produce future or a job report, which the command
    prints as its one line; logged too, they would show twice)."""

    def __init__(self, reported: frozenset[str]) -> None:
        super().__init__()
        self.reported = reported

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.name in self.reported:
            return False
        record.exc_info = record.exc_text = record.stack_info = None
        return True


# Per command, the loggers whose errors it reports itself (see _Quiet).
REPORTED_BY = {
    "produce": frozenset({"agent.producer"}),
    "compact": frozenset({"compactor.worker"}),
}


_command_handler: logging.Handler | None = None  # the one configure_command installed


def configure_command(command: str | None, verbose: bool) -> None:
    """Logging of the short commands: `silt: level: name: message` lines on stderr, WARNING
    and up; with --verbose, INFO and up with tracebacks, nothing held back. Replaces only the
    handler it installed before (a test's own capture stays)."""
    global _command_handler
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("silt: %(levelname)s: %(name)s: %(message)s"))
    if not verbose:
        handler.addFilter(_Quiet(REPORTED_BY.get(command or "", frozenset())))
        handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    if _command_handler is not None:
        root.removeHandler(_command_handler)
    root.addHandler(handler)
    _command_handler = handler
    if verbose:
        root.setLevel(logging.INFO)
