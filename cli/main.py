"""The `silt` command.

Settings come from `settings.load`: defaults < `--config FILE` (TOML) < `SILT_*` variables
< flags. Errors are one line on stderr with exit 1; usage errors (including flags a command
would ignore) exit 2 (click's convention). Every command a script may read has `--json`.
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn, ParamSpec, TypeVar
from urllib.parse import urlsplit, urlunsplit

import click
import sqlalchemy.exc as sa_exc

from agent import Agent, AgentConfig, AgentError, Reader, tune_gc
from agent.config import (
    ADVERTISED_LISTENERS,
    BUFFER_MEMORY,
    FLUSH_BYTES,
    LINGER_MS,
    LISTENERS,
)
from agent.partitioner import DefaultPartitioner
from agent.producer import ProduceFuture
from compactor.config import (
    FILE_DELETE_DELAY_MS,
    MEMORY_BUDGET,
    POLL_INTERVAL_S,
    CompactorConfig,
)
from fileformat.errors import FormatError
from metadata import MetadataStore
from metadata.config import ENV_URL as METADATA_ENV
from metadata.config import MetadataConfig
from metadata.errors import MetadataError
from metadata.topicconfig import AlterOp, ConfigChange
from objectstore import ObjectStore
from objectstore.config import ENV_URL as STORE_ENV
from objectstore.config import URL, StoreConfig
from objectstore.errors import ObjectStoreError
from settings import Section, declared, show
from settings.load import Origin, Settings, Source, load_settings

from . import groups as cg
from .cluster import open_cluster
from .errors import CommandFailed
from .interrupt import EXIT_INTERRUPTED, Interrupted, Stop, stop_on_signals
from .jsonlines import LineError, consumed_to_json, parse_produce_line
from .logs import configure as configure_logging
from .logs import configure_command, log_format_option

MIB = 1024 * 1024
FOLLOW_POLL_S = 0.5  # silt consume --follow: seconds between looks for new records
log = logging.getLogger(__name__)

KNOWN_ERRORS: tuple[type[BaseException], ...] = (
    CommandFailed,
    AgentError,
    MetadataError,
    ObjectStoreError,
    FormatError,
    FileNotFoundError,
    PermissionError,
    ValueError,
)

# Long-running commands: they log as services do (--log-format), not as the short commands.
SERVICES = frozenset({"agent", "compactor", "up"})

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
        """The settings with a command's flags on top (None: the flag was not given)."""
        given = {k: v for k, v in {**self.flags, **flags}.items() if v is not None}
        return load_settings(self.config_path, os.environ, given)

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


def _interactive() -> bool:
    return sys.stderr.isatty()


@contextmanager
def progress(description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr when it is a terminal (stdout may be redirected: the
    bar never mixes with the output); silent when stderr is piped."""
    if not _interactive():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def _default(section: type[Section], key: str, scale: int = 1, unit: str = "") -> str:
    """For --help: the setting a flag overrides and its default (divided by `scale`)."""
    value = getattr(section(), declared(section)[key][0])
    return f"{section.SECTION}.{key} = {show(value // scale if scale > 1 else value)}{unit}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", default=None, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Settings file (TOML): tables store, metadata, agent, compactor, planner.")
@click.option("--store", default=None, metavar="URL", show_default=_default(StoreConfig, URL),
              help=f"Object store URL (file://, memory://, s3://bucket/prefix, any fsspec"
                   f" URL). Env: {STORE_ENV}.")
@click.option("--metadata", default=None, metavar="URL",
              show_default=_default(MetadataConfig, URL),
              help=f"Metadata URL (sqlite:///path, postgresql://...). Env: {METADATA_ENV}.")
@click.option("-v", "--verbose", is_flag=True,
              help="Show tracebacks and informational log lines (errors stay one line"
                   " without it).")
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, store: str | None,
        metadata: str | None, verbose: bool) -> None:
    """siltstream: a log on object storage with key-deduplicating compaction."""
    obj = Context(config_path, {f"store.{URL}": store, f"metadata.{URL}": metadata},
                  verbose=verbose)
    if ctx.invoked_subcommand not in SERVICES:  # those configure their own logging
        configure_command(ctx.invoked_subcommand, verbose)
    ctx.obj = obj
    ctx.call_on_close(obj.close)


# ---------------------------------------------------------------------------- config


@cli.group()
def config() -> None:
    """The effective settings."""


def _hide_password(value: str) -> str:
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


def _json_value(value: object) -> object:
    if isinstance(value, enum.Enum):
        return show(value)
    return _hide_password(value) if isinstance(value, str) else value


def _origin_json(origin: Origin) -> dict[str, str | None]:
    return {"source": str(origin.source), "from": origin.name or None}


@config.command("show")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def config_show(ctx: Context, as_json: bool) -> None:
    """Print every setting's effective value and where it came from (default, file, env
    variable, flag), lowest precedence first: defaults < --config FILE < SILT_* < flags.
    Passwords in URLs are shown as ***."""
    values = ctx.settings.values()
    if as_json:
        click.echo(json.dumps({v.key: {"value": _json_value(v.value), **_origin_json(v.origin)}
                               for v in values}))
        return
    rows = [["key", "value", "from"]]
    rows += [[v.key, _hide_password(show(v.value)), str(v.origin)] for v in values]
    for line in cg.columns(rows, indent=""):
        click.echo(line)


# ---------------------------------------------------------------------------- topics


@cli.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


def _parse_configs(pairs: tuple[str, ...], flag: str = "--config") -> dict[str, str]:
    configs: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not key=value", param_hint=flag)
        configs[key.strip()] = value.strip()
    return configs


@topics.command("create")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), required=True)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="Kafka topic config, e.g. cleanup.policy=compact. Repeatable.")
@pass_ctx
@one_line_errors
def topics_create(ctx: Context, name: str, partitions: int, configs: tuple[str, ...]) -> None:
    """Create a topic with N partitions."""
    ctx.open(create=True)
    info = ctx.metadata.create_topic(name, partitions, _parse_configs(configs))
    click.echo(f"created topic {info.name} with {info.partitions} partitions")


def _topic_json(ctx: Context, name: str, detail: bool) -> dict[str, Any]:
    info = ctx.metadata.get_topic(name)
    out: dict[str, Any] = {"name": info.name, "partitions": info.partitions,
                           "configs": dict(info.configs)}
    if detail:
        parts = [{"partition": p.partition, "log_start_offset": p.log_start_offset,
                  "next_offset": p.next_offset, "segments": segments, "bytes": size,
                  "records": records}
                 for p, segments, size, records in ctx.metadata.partition_summaries(name)]
        out["partition_detail"] = parts
    return out


@topics.command("list")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def topics_list(ctx: Context, as_json: bool) -> None:
    """List topics."""
    rows: list[dict[str, Any]] = [{"name": t.name, "partitions": t.partitions,
                                   "configs": dict(t.configs)} for t in ctx.metadata.list_topics()]
    if as_json:
        click.echo(json.dumps(rows))
        return
    for row in rows:
        policy = row["configs"].get("cleanup.policy", "delete")
        click.echo(f"{row['name']}\tpartitions={row['partitions']}\tcleanup.policy={policy}")


@topics.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def topics_describe(ctx: Context, name: str, as_json: bool) -> None:
    """Show a topic's configs and, per partition, log start, next offset, segments, bytes."""
    row = _topic_json(ctx, name, True)
    if as_json:
        click.echo(json.dumps(row))
        return
    click.echo(f"topic {row['name']}  partitions={row['partitions']}")
    for key, value in sorted(row["configs"].items()):
        click.echo(f"  {key}={value}")
    click.echo("  partition  log_start  next_offset  segments  records  bytes")
    for p in row["partition_detail"]:
        click.echo(f"  {p['partition']:>9}  {p['log_start_offset']:>9}  {p['next_offset']:>11}"
                   f"  {p['segments']:>8}  {p['records']:>7}  {p['bytes']}")


@topics.command("delete")
@click.argument("name")
@pass_ctx
@one_line_errors
def topics_delete(ctx: Context, name: str) -> None:
    """Delete a topic (its objects are deleted by GC after the grace period)."""
    ctx.metadata.delete_topic(name)
    click.echo(f"deleted topic {name}")


@topics.command("alter")
@click.argument("name")
@click.option("--set", "--config", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a topic config (validated). Repeatable.")
@click.option("--delete", "deletes", multiple=True, metavar="KEY",
              help="Remove an override (back to the default). Repeatable.")
@pass_ctx
@one_line_errors
def topics_alter(ctx: Context, name: str, sets: tuple[str, ...],
                 deletes: tuple[str, ...]) -> None:
    """Change a topic's configs (validated as `topics create` validates them)."""
    changes = [ConfigChange(k, AlterOp.SET, v) for k, v in _parse_configs(sets).items()]
    changes += [ConfigChange(k, AlterOp.DELETE) for k in deletes]
    info = ctx.metadata.alter_topic_configs(name, changes)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(info.configs.items())) or "defaults"
    click.echo(f"topic {name} configs: {shown}")


@topics.command("add-partitions")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), required=True,
              help="The new total partition count (topics only grow).")
@pass_ctx
@one_line_errors
def topics_add_partitions(ctx: Context, name: str, partitions: int) -> None:
    """Grow a topic to N partitions."""
    info = ctx.metadata.add_partitions(name, partitions)
    click.echo(f"topic {name} has {info.partitions} partitions")


@topics.command("delete-records")
@click.argument("name")
@click.option("--partition", type=click.IntRange(min=0), required=True)
@click.option("--before", "offset", type=int, required=True,
              help="The new log start offset (-1: the high watermark).")
@pass_ctx
@one_line_errors
def topics_delete_records(ctx: Context, name: str, partition: int, offset: int) -> None:
    """Delete a partition's records below an offset (Kafka's DeleteRecords)."""
    result = ctx.metadata.delete_records({(name, partition): offset})[(name, partition)]
    if isinstance(result, Exception):
        raise result
    click.echo(f"{name}/{partition} log start offset {result}")


# ---------------------------------------------------------------------------- groups


@cli.group()
def groups() -> None:
    """List, describe, reset the offsets of and delete consumer groups."""


def _shown(value: object) -> str:
    return "-" if value is None else str(value)


@groups.command("list")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def groups_list(ctx: Context, as_json: bool) -> None:
    """List consumer groups: state, protocol type, members, live coordinator agent."""
    rows = cg.list_rows(ctx.metadata)
    if as_json:
        click.echo(json.dumps(rows))
        return
    for row in rows:
        click.echo(f"{row['group_id']}\tstate={row['state']}"
                   f"\tprotocol_type={_shown(row['protocol_type'])}\tmembers={row['members']}"
                   f"\tcoordinator={_shown(row['coordinator'])}")


@groups.command("describe")
@click.argument("group")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def groups_describe(ctx: Context, group: str, as_json: bool) -> None:
    """Show a group's members and assignments and, per partition, committed offset, log end
    offset and lag."""
    row = cg.describe(ctx.metadata, group)
    if as_json:
        click.echo(json.dumps(row))
        return
    protocol = "/".join(row[k] for k in ("protocol_type", "protocol") if row[k]) or "-"
    click.echo(f"group {group}  state={row['state']}  protocol={protocol}"
               f"  generation={row['generation']}  members={row['members']}"
               f"  coordinator={_shown(row['coordinator'])}")
    if row["member_detail"]:
        members = [["member", "instance", "client", "host", "partitions"]]
        for m in row["member_detail"]:
            parts = (f"{m['assignment_bytes']} bytes" if m["assignment"] is None else
                     ",".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"]))
            members.append([m["member_id"], _shown(m["group_instance_id"]), m["client_id"],
                            m["client_host"], parts or "-"])
        for line in cg.columns(members):
            click.echo(line)
    offsets = [["topic", "partition", "committed", "end", "lag", "member"]]
    offsets += [[o["topic"], str(o["partition"]), _shown(o["committed_offset"]),
                 _shown(o["log_end_offset"]), _shown(o["lag"]), _shown(o["member_id"])]
                for o in row["offsets"]]
    for line in cg.columns(offsets):
        click.echo(line)


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", required=True)
@click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Only this partition (repeatable; default: all of the topic's).")
@click.option("--to-earliest", is_flag=True, help="The partition's log start offset.")
@click.option("--to-latest", is_flag=True, help="The partition's next offset (log end).")
@click.option("--to-offset", type=int, default=None,
              help="This offset, clamped into [log start, log end].")
@click.option("--to-datetime", default=None, metavar="ISO",
              help="The first offset whose record timestamp is >= this time (ISO 8601,"
                   " e.g. 2024-05-01T12:00:00+00:00; no zone: UTC); none: the log end.")
@click.option("--execute", is_flag=True, help="Apply the plan (default: print it only).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def groups_reset_offsets(ctx: Context, group: str, topic: str, partitions: tuple[int, ...],
                         to_earliest: bool, to_latest: bool, to_offset: int | None,
                         to_datetime: str | None, execute: bool, as_json: bool) -> None:
    """Move a group's committed offsets on TOPIC (the group must have no members).

    Prints the plan (partition, current committed offset, new offset); only --execute
    commits it, and is refused while the group has members.
    """
    targets = [cg.ResetTo(kind) for kind, given in
               (("earliest", to_earliest), ("latest", to_latest)) if given]
    if to_offset is not None:
        targets.append(cg.ResetTo("offset", to_offset))
    if to_datetime is not None:
        try:
            targets.append(cg.ResetTo("datetime", cg.parse_datetime(to_datetime)))
        except ValueError:
            raise click.BadParameter(f"{to_datetime!r} is not an ISO 8601 date-time",
                                     param_hint="--to-datetime") from None
    if len(targets) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset,"
                               " --to-datetime")
    to = targets[0]
    store = ctx.store if to.kind == "datetime" else None
    rows = cg.reset_plan(ctx.metadata, store, group, topic, partitions, to)
    if execute:
        cg.apply_plan(ctx.metadata, group, rows)
    if as_json:
        click.echo(json.dumps({"group_id": group, "executed": execute, "partitions": rows}))
    else:
        table = [["topic", "partition", "current", "new"]]
        table += [[r["topic"], str(r["partition"]), _shown(r["current_offset"]),
                   str(r["new_offset"])] for r in rows]
        for line in cg.columns(table, indent=""):
            click.echo(line)
    click.echo(f"reset {len(rows)} partition(s) of group {group}" if execute else
               "dry run: nothing changed (--execute applies it)", err=True)


@groups.command("delete")
@click.argument("group")
@pass_ctx
@one_line_errors
def groups_delete(ctx: Context, group: str) -> None:
    """Delete a group with no members: its stored state and committed offsets."""
    ctx.metadata.delete_group(group)
    click.echo(f"deleted group {group}")


# ---------------------------------------------------------------------------- produce


class _AckPrinter:
    """Prints `{"partition", "offset"}` for acknowledged records, in input order, as soon as
    they are acknowledged: from a callback on the head record's flush (one per flush, not
    per record), so the offsets of what was typed show while `silt produce` waits for the
    next line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: deque[tuple[int, ProduceFuture]] = deque()
        self._watching = False  # a callback waits on the head record's flush
        self.printed = 0

    def add(self, partition: int, fut: ProduceFuture) -> None:
        with self._lock:
            self._pending.append((partition, fut))
            if self._watching:
                return
            self._watching = True
        fut.add_done_callback(self._on_done)

    def _on_done(self, _: ProduceFuture) -> None:
        with self._lock:
            self._print_ready()
            head = self._pending[0][1] if self._pending else None
            if head is not None and head.done():
                head = None  # it failed: drain(wait=True) raises it
            self._watching = head is not None
        if head is not None:  # the next flush's first record (runs now if done already)
            head.add_done_callback(self._on_done)

    def _print_ready(self) -> None:
        """Print the acknowledged head of the queue (holding the lock); a failed record
        stops it, left for `drain(wait=True)` to raise."""
        pending = self._pending
        while pending and pending[0][1].done() and pending[0][1].exception() is None:
            partition, fut = pending.popleft()
            click.echo(json.dumps({"partition": partition, "offset": fut.result()}))
            self.printed += 1

    def drain(self, *, wait: bool) -> None:
        """Print the acknowledged head of the queue; with `wait`, all of it (the first failed
        record raises its error). Waits outside the lock: the flusher's callback takes it."""
        while True:
            with self._lock:
                self._print_ready()
                pending = self._pending
                if not wait or not pending:
                    return
                head = pending[0][1]
                if head.done():
                    head.result()  # raises the failure
            head.exception()  # until it is done


@cli.command()
@click.argument("topic")
@click.option("--file", "source", type=click.File("r"), default="-",
              help="JSON lines to produce (default: stdin).")
@click.option("--linger-ms", type=click.IntRange(min=0), default=None,
              show_default=_default(AgentConfig, LINGER_MS),
              help="Flush at the latest this long after the first record.")
@click.option("--flush-bytes", type=click.IntRange(min=1), default=None,
              show_default=_default(AgentConfig, FLUSH_BYTES),
              help="Flush once this many bytes are buffered (agent.buffer.memory, if left at"
                   " its default, grows to 8x this).")
@pass_ctx
@one_line_errors
def produce(ctx: Context, topic: str, source: IO[str], linger_ms: int | None,
            flush_bytes: int | None) -> None:
    """Produce JSON lines {"partition"?, "key", "value", "headers"?} to TOPIC.

    Prints one {"partition", "offset"} line per record once it is committed. A malformed
    line stops the run: records before it are committed, nothing after it is produced.
    Ctrl-C or SIGTERM stops reading, waits for the records in flight, prints their offsets,
    says from which input line to resume, and exits 130.
    """
    flags: dict[str, object | None] = {f"agent.{LINGER_MS}": linger_ms,
                                       f"agent.{FLUSH_BYTES}": flush_bytes}
    buffer_key = f"agent.{BUFFER_MEMORY}"
    if flush_bytes is not None and ctx.settings.origin(buffer_key).source is Source.DEFAULT:
        flags[buffer_key] = max(flush_bytes * 8, ctx.settings.agent.buffer_memory)
    config = ctx.load(flags).agent
    ctx.open(create=True)
    info = ctx.metadata.get_topic(topic)
    with stop_on_signals() as stop:  # held until the offsets are printed
        acked, lineno, bad = _produce_lines(stop, agent_config=config, ctx=ctx, topic=topic,
                                            source=source, partitions=info.partitions)
    if bad is not None:
        bad_line, message = bad
        click.echo(
            f"silt: line {bad_line}: {message}; the {acked} record(s) before it were committed"
            f" (printed above), nothing from line {bad_line} on was produced",
            err=True,
        )
        sys.exit(1)
    if stop.requested:
        committed = f"{acked} lines committed" if acked else "nothing was committed"
        name = "-" if source.name == "<stdin>" else source.name
        click.echo(f"interrupted: {committed}; resume from line {lineno + 1}"
                   f" (tail -n +{lineno + 1} {name} | silt produce {topic})", err=True)
        sys.exit(EXIT_INTERRUPTED)


def _produce_lines(stop: Stop, *, agent_config: AgentConfig, ctx: Context, topic: str,
                   source: IO[str], partitions: int) -> tuple[int, int, tuple[int, str] | None]:
    """Produce `source`'s lines until its end, a bad line or a stop signal; print the offsets
    of every record produced. Returns (records committed, input lines handled, the bad line
    and why). A failed flush raises (the offsets before it are printed)."""
    partitioner = DefaultPartitioner()
    acks = _AckPrinter()
    bad: tuple[int, str] | None = None
    lineno = 0  # the input lines handled (produced, or blank)
    with progress("producing") as advance, Agent(ctx.store, ctx.metadata, agent_config) as agent:
        lines = iter(source)
        try:
            while True:
                with stop.wait():  # a signal while reading: stop here, this line unread
                    line = next(lines, None)
                if line is None:
                    break
                if line.strip():
                    try:
                        rec = parse_produce_line(line)
                        partition = rec.partition
                        if partition is None:
                            partition = partitioner.partition(rec.key, partitions)
                        fut = agent.produce(topic, partition, rec.key, rec.value, rec.headers)
                    except (LineError, AgentError) as exc:
                        bad = (lineno + 1, str(exc))
                        break
                    acks.add(partition, fut)
                    advance(1)
                lineno += 1
        except Interrupted:
            pass
        if stop.requested:
            click.echo(f"silt: {signal.Signals(stop.signum or signal.SIGINT).name}: stopped"
                       " reading; waiting for the records in flight", err=True)
    acks.drain(wait=True)
    return acks.printed, lineno, bad


# ---------------------------------------------------------------------------- consume


@cli.command()
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Only this partition (default: all, one after the other).")
@click.option("--from-offset", type=click.IntRange(min=0), default=None,
              help="First offset to read (default: each partition's log start).")
@click.option("--max-records", type=click.IntRange(min=0), default=None,
              help="Stop after this many records in total.")
@click.option("--follow", is_flag=True,
              help="Then keep polling for new records until Ctrl-C or SIGTERM (exit 0).")
@pass_ctx
@one_line_errors
def consume(ctx: Context, topic: str, partition: int | None, from_offset: int | None,
            max_records: int | None, follow: bool) -> None:
    """Print records of TOPIC as JSON lines, in offset order per partition.

    A start offset at or past a partition's log end is said on stderr (with the log end).
    A closed stdout (`| head`) ends the command quietly, exit 0.
    """
    parts = ctx.metadata.partitions(topic)
    if partition is not None:
        if partition >= len(parts):
            raise ValueError(f"partition {partition} out of range for topic {topic!r}"
                             f" (0..{len(parts) - 1})")
        parts = [parts[partition]]
    reader = Reader(ctx.store, ctx.metadata)
    remaining = max_records
    out = sys.stdout
    # Per partition, the next offset to read.
    position = {p.partition: p.log_start_offset if from_offset is None else from_offset
                for p in parts}
    if from_offset is not None:
        past = [p for p in parts if from_offset >= p.next_offset]
        for p in past:
            click.echo(f"silt: {topic}/{p.partition}: offset {from_offset} is at or past the"
                       f" log end ({p.next_offset}): no records", err=True)

    def read_all(stop: Stop | None) -> None:
        nonlocal remaining
        for p in position:
            for rec in reader.read(topic, p, position[p], remaining):
                if stop is not None and stop.requested:
                    return
                out.write(consumed_to_json(rec) + "\n")
                position[p] = rec.offset + 1
                if remaining is not None:
                    remaining -= 1
            if remaining is not None and remaining <= 0:
                return
        out.flush()

    try:
        if not follow:
            read_all(None)
        else:
            with stop_on_signals() as stop:
                read_all(stop)
                while remaining is None or remaining > 0:
                    with stop.wait():  # a signal now (or received while reading) ends it
                        time.sleep(FOLLOW_POLL_S)
                    ends = {p.partition: p.next_offset for p in ctx.metadata.partitions(topic)}
                    if any(ends.get(p, 0) > position[p] for p in position):
                        read_all(stop)
        out.flush()
    except Interrupted:
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly; stdout cannot be flushed at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


# ---------------------------------------------------------------------------- stats


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def stats(ctx: Context, as_json: bool) -> None:
    """Files, bytes and segments per level (live data); files and bytes per state, so
    what is retired and awaiting GC shows too: live + the states awaiting GC is what the
    store holds."""
    from metadata import schema as ms

    st = ctx.metadata.stats()
    data = st.as_dict()
    if as_json:
        click.echo(json.dumps(data))
        return
    click.echo("level  files  bytes  segments")
    for row in data["levels"]:
        click.echo(f"{row['level']:>5}  {row['files']:>5}  {row['bytes']:>5}  {row['segments']:>8}")
    rows = [["state", "files", "bytes", ""]]
    for state in ms.FILE_STATES:
        if state == ms.FILE_DELETED or not st.files_by_state.get(state):
            continue  # deleted files are gone from the store
        rows.append([state, str(st.files_by_state[state]), str(st.bytes_by_state[state]),
                     STATE_NOTES.get(state, "")])
    for line in cg.columns(rows, indent=""):
        click.echo(line.rstrip())
    held = sum(b for state, b in st.bytes_by_state.items() if state != ms.FILE_DELETED)
    click.echo(f"in the store: {held} bytes (live {st.bytes_by_state.get(ms.FILE_LIVE, 0)},"
               f" awaiting GC {held - st.bytes_by_state.get(ms.FILE_LIVE, 0)})")


# What `silt stats` says of each file state.
STATE_NOTES = {
    "pending": "being written (a crashed write's stay until GC)",
    "retired": "replaced by compaction or retention; deleted after the GC grace period",
    "abandoned": "a failed write; deleted by GC",
    "deleting": "being deleted by GC",
}


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def retention(ctx: Context, as_json: bool) -> None:
    """Apply retention.ms / retention.bytes now (every compaction round does this first)."""
    result = ctx.metadata.apply_retention()
    rows = [asdict(c) for c in result.changes]
    if as_json:
        click.echo(json.dumps({"partitions": rows,
                               "retired_files": list(result.retired_file_ids)}))
        return
    if not rows:
        click.echo("nothing past retention")
    for r in rows:
        click.echo(f"{r['topic']}/{r['partition']}: log start -> {r['log_start_offset']} "
                   f"({r['segments']} segments, {r['records']} records, {r['bytes']} bytes)")
    if result.retired_file_ids:
        click.echo(f"{len(result.retired_file_ids)} files retired (deleted after the GC grace)")


@cli.command()
@click.option("--grace-ms", type=click.IntRange(min=0), default=None,
              show_default=_default(CompactorConfig, FILE_DELETE_DELAY_MS, unit=" ms"),
              help="Delete files retired at least this long ago (0: all of them now).")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def gc(ctx: Context, grace_ms: int | None, as_json: bool) -> None:
    """Collect garbage now, as the compactor does every compactor.gc.interval.ms.

    Deletes the objects of files retired (by compaction or retention) or abandoned at least
    the grace period ago; uploads still pending are left for compactor.lease.ms at least,
    so writes under way never fail. Aborts the store's unfinished uploads (S3 multipart
    uploads a killed process left) begun longer ago than that. Then prunes old history
    rows from the metadata.
    """
    from compactor import Compactor

    config = ctx.load({f"compactor.{FILE_DELETE_DELAY_MS}": grace_ms}).compactor
    comp = Compactor(ctx.store, ctx.metadata, config)
    report = comp.collect_garbage(sweep_uploads=True)
    deleted = report.deleted
    waiting = len(ctx.metadata.files_to_gc(comp.clock.now_ms()))
    if as_json:
        click.echo(json.dumps({"deleted": len(deleted), "keys": deleted, "waiting": waiting,
                               "grace_ms": config.grace_ms,
                               "uploads_aborted": report.uploads_aborted}))
        return
    click.echo(f"deleted {len(deleted)} objects; {waiting} files wait for their grace period"
               f" ({config.grace_ms:,} ms) or lease ({config.lease_ms:,} ms);"
               f" aborted {report.uploads_aborted} unfinished uploads")


@cli.command()
@click.option("--deep", is_flag=True,
              help="Also read every live object: every batch CRC, the index (two GETs each).")
@click.option("--fix", is_flag=True,
              help="Delete orphan objects older than compactor.file.delete.delay.ms.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def doctor(ctx: Context, deep: bool, fix: bool, as_json: bool) -> None:
    """Check the object store against the metadata; exit 1 if anything is wrong.

    Live objects missing or of the wrong size, orphan objects, pending uploads older than
    compactor.lease.ms, live segments in files that are not live; --deep: corrupt objects.
    """
    from compactor.doctor import doctor as check

    report = check(ctx.store, ctx.metadata, ctx.settings.compactor, deep=deep, fix=fix)
    if as_json:
        click.echo(json.dumps(report.as_dict()))
    else:
        for line in report.lines():
            click.echo(line)
    if not report.ok:
        sys.exit(1)


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--all", "everything", is_flag=True, help="Ignore triggers: compact everything.")
@pass_ctx
@one_line_errors
def plan(ctx: Context, as_json: bool, everything: bool) -> None:
    """Show the compaction jobs `silt compact --once` would run now, and what it waits for.

    Also when the plan next changes with no new data (an age or lag threshold passing:
    a later `compact --once` then runs other jobs) and what retention is due (a round
    applies it before planning, which can change the jobs).
    """
    from datetime import datetime

    from compactor import Compactor
    from planner import describe, next_change, propose, propose_all

    comp = Compactor(ctx.store, ctx.metadata, ctx.settings.compactor)
    config = ctx.settings.compactor.planner
    _, snap = comp.snapshot()
    now = comp.clock.now_ms()  # one instant for the plan and the next change
    out = describe((propose_all if everything else propose)(snap, now, config))
    change = None if everything else next_change(snap, now, config)
    due = ctx.metadata.retention_due()
    out["now_ms"] = now
    out["next_change"] = None if change is None else {"at_ms": change.at_ms,
                                                      "reason": change.reason}
    out["retention_due"] = [asdict(c) for c in due]
    if as_json:
        click.echo(json.dumps(out))
        return
    for job in out["jobs"]:
        click.echo(f"job {job['spec_id']}: {job['trigger']}: {job['reason']}")
        click.echo(f"  files {job['input_files']} ({job['input_bytes']:,} bytes) -> "
                   f"L{job['output_level']}; {job['compacted_partitions']} compacted partitions"
                   f" ({job['whole_log_partitions']} whole-log)")
    if not out["jobs"]:
        click.echo("no job to run now")
    for line in out["waiting"]:
        click.echo(f"waiting: {line}")
    if change is not None:
        at = datetime.fromtimestamp(change.at_ms / 1000).strftime("%H:%M:%S")
        click.echo(f"changes: at {at} (in {(change.at_ms - now) / 1000:.1f} s)"
                   f" {change.reason}")
    for c in due:
        click.echo(f"retention due: {c.topic}/{c.partition} log start -> {c.log_start_offset}"
                   f" ({c.segments} segments, {c.records} records, {c.bytes} bytes);"
                   " compact --once applies it before planning")


def _print_reports(reports: list[Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in reports]))
        return
    for r in reports:
        st = r.stats
        click.echo(
            f"job {r.spec_id} {r.outcome}: {r.input_files} files {r.input_bytes:,} B ->"
            f" {r.output_files} files {r.output_bytes:,} B; records {st.get('records_in', 0)}"
            f" -> {st.get('records_out', 0)} (duplicates {st.get('duplicates_dropped', 0)},"
            f" tombstones {st.get('tombstones_dropped', 0)} dropped); requests {r.requests};"
            f" {r.duration_s:.2f}s" + (f"; {r.error}" if r.error else "")
        )
    if not reports:
        click.echo("no job to run now")


@cli.command()
@click.option("--once", is_flag=True, help="Run the jobs proposed now and exit.")
@click.option("--all", "everything", is_flag=True,
              help="Ignore the triggers and compact everything that can be, fully.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--memory", "memory_mib", type=click.IntRange(min=1), default=None,
              show_default=_default(CompactorConfig, MEMORY_BUDGET, MIB, " MiB"),
              help="Offset-map memory budget per job, MiB.")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local",
              show_default=True, help="Run jobs here, or as Spark tasks (siltstream[spark]).")
@click.option("--master", default=None, help="Spark master URL, e.g. local[2] (--engine spark).")
@click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="Spark setting for --engine spark, e.g. spark.executor.memory=2g or"
                   " spark.executorEnv.AWS_PROFILE=silt. Repeatable.")
@pass_ctx
@one_line_errors
def compact(ctx: Context, once: bool, everything: bool, as_json: bool, memory_mib: int | None,
            engine: str, master: str | None, spark_conf: tuple[str, ...]) -> None:
    """Run compaction jobs (`--once`); without --once, same as `silt compactor`.

    With --once, exits 1 if any job failed, naming the first failure on stderr.
    """
    from compactor import Compactor

    ignored = [flag for flag, given in (("--all", everything), ("--json", as_json)) if given]
    if not once and ignored:
        raise click.UsageError(f"{' and '.join(ignored)} would be ignored without --once"
                               " (compact then runs the worker loop, as silt compactor)")
    spark_only = [flag for flag, given in (("--master", master is not None),
                                           ("--spark-conf", bool(spark_conf))) if given]
    if spark_only and engine != "spark":
        verb = "needs" if len(spark_only) == 1 else "need"
        raise click.UsageError(f"{' and '.join(spark_only)} {verb} --engine spark")
    ctx.open(create=not once)
    memory = None if memory_mib is None else memory_mib * MIB
    config = ctx.load({f"compactor.{MEMORY_BUDGET}": memory}).compactor
    if engine == "spark":
        if not once:
            raise ValueError("--engine spark runs one round of jobs: add --once")
        try:
            from spark.compaction import DEFAULT_MASTER, run_on_spark, summarize
            from spark.errors import SparkJobError
        except ImportError as exc:
            raise ValueError("--engine spark needs pyspark: pip install 'siltstream[spark]'"
                             ) from exc
        try:
            reports = run_on_spark(ctx.store_url, ctx.metadata_url,
                                   master=master or DEFAULT_MASTER, everything=everything,
                                   config=config,
                                   spark_conf=_parse_configs(spark_conf, "--spark-conf"))
        except SparkJobError as exc:
            raise CommandFailed(str(exc)) from exc
        _print_reports(reports, as_json)
        if not as_json and reports:
            click.echo("summary: " + ", ".join(
                f"{k} {v:,}" for k, v in summarize(reports).items()))
    elif not once:
        configure_logging("text", logging.INFO)
        _serve_compactor(ctx, config)
        return
    else:
        reports = Compactor(ctx.store, ctx.metadata, config).run_once(everything=everything)
        _print_reports(reports, as_json)
    failed = [r for r in reports if r.outcome == "failed"]
    if failed:
        first = str(failed[0].error).splitlines()[0] if failed[0].error else "no error recorded"
        raise CommandFailed(f"{len(failed)} of {len(reports)} compaction jobs failed; first:"
                            f" job {failed[0].spec_id}: {first}")


def _serve_compactor(ctx: Context, config: CompactorConfig) -> None:
    """Run the compaction service until SIGTERM/SIGINT, then let it finish or abandon its
    job (compactor.shutdown.timeout.ms) and exit 0. The service runs on its own thread:
    signal handlers (main thread) then never interrupt it while it holds a lock."""
    from compactor import Compactor, CompactorService
    from compactor.health import metrics_server

    service = CompactorService(Compactor(ctx.store, ctx.metadata, config))
    metrics = metrics_server(service.compactor).start()  # compactor.metrics.listeners
    failed: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:  # reported below: exit 1
            log.exception("silt compactor failed")
            failed.append(exc)

    def on_signal(signum: int, frame: object) -> None:
        if not service.stopping:
            log.warning("silt compactor stopping (%s): no new job; the current one has %d ms"
                        " to finish", signal.Signals(signum).name, config.shutdown_timeout_ms)
        service.stop()  # a repeated signal changes nothing

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    thread = threading.Thread(target=run, name="silt-compactor")
    thread.start()
    while thread.is_alive():
        thread.join(0.5)
    metrics.stop()
    if failed:
        sys.exit(1)


@cli.command()
@click.option("--poll-interval", type=click.FloatRange(min=0.1), default=None,
              show_default=_default(CompactorConfig, POLL_INTERVAL_S),
              help="Seconds between rounds.")
@log_format_option
@pass_ctx
@one_line_errors
def compactor(ctx: Context, poll_interval: float | None, log_format: str) -> None:
    """Run a compaction worker until SIGTERM or SIGINT (any number may run at once).

    Rounds of jobs every compactor.poll.interval.s; retention and garbage collection on
    timers of their own (retention.check.interval.ms, gc.interval.ms). Stopped, it starts
    no new job, gives the current one compactor.shutdown.timeout.ms to finish, else
    abandons it and releases its lease, and exits 0.
    """
    config = ctx.load({f"compactor.{POLL_INTERVAL_S}": poll_interval}).compactor
    ctx.open(create=True)
    configure_logging(log_format, logging.INFO)
    _serve_compactor(ctx, config)


@cli.command()
@click.option("--partitions", default="1,10,100,1000", show_default=True,
              help="Comma-separated partitions-per-file sweep.")
@click.option("--files", "files_per_round", type=click.IntRange(min=1), default=4,
              show_default=True, help="Agent flushes (objects) per round.")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="Produce-then-compact rounds.")
@click.option("--records-per-partition", type=click.IntRange(min=1), default=2,
              show_default=True, help="Records per partition per flush.")
@click.option("--record-bytes", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--keys", type=click.IntRange(min=1), default=50, show_default=True,
              help="Key cardinality per compacted partition.")
@click.option("--compacted-share", type=click.FloatRange(0, 1), default=0.5,
              show_default=True, help="Share of partitions on a compacted topic.")
@click.option("--flushes-per-second", type=click.FloatRange(min=0.001), default=4.0,
              show_default=True, help="Ingest rate used for the per-day dollars.")
@click.option("--prices", "price_table", default="s3-standard", show_default=True,
              help="Request price table; an unknown name lists the known ones.")
@click.option("--put-price", type=float, default=None,
              help="Override: dollars per 1,000 PUT/COPY/POST/LIST requests.")
@click.option("--get-price", type=float, default=None,
              help="Override: dollars per 1,000 GET/HEAD requests.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write a PNG chart (matplotlib).")
@one_line_errors
def costs(partitions: str, files_per_round: int, rounds: int, records_per_partition: int,
          record_bytes: int, keys: int, compacted_share: float, flushes_per_second: float,
          price_table: str, put_price: float | None, get_price: float | None, as_json: bool,
          plot_path: str | None) -> None:
    """Measure object-store request costs of siltstream against two naive designs.

    Runs against AWS_ENDPOINT_URL (LocalStack, MinIO, AWS) or a moto server it starts on
    127.0.0.1, and cross-checks client counts with the server's when it started it.
    """
    # Lazily: the cost-comparison tool and its naive designs are not part of the product.
    from costs import PRICE_TABLES, Workload, plot, print_table, run_costs
    from costs import as_json as costs_json

    try:
        sweep = tuple(int(p) for p in partitions.split(",") if p.strip())
    except ValueError:
        raise click.BadParameter(f"{partitions!r} is not a comma-separated list of integers",
                                 param_hint="--partitions") from None
    if not sweep or min(sweep) < 1:
        raise click.BadParameter("partition counts must be >= 1", param_hint="--partitions")
    if price_table not in PRICE_TABLES:
        raise click.BadParameter(f"{price_table!r} is not one of "
                                 f"{', '.join(sorted(PRICE_TABLES))}", param_hint="--prices")
    w = Workload(sweep, files_per_round, rounds, records_per_partition, record_bytes, keys,
                 compacted_share, flushes_per_second)
    prices = dict(PRICE_TABLES[price_table])
    if put_price is not None:
        prices["write"] = put_price / 1000
    if get_price is not None:
        prices["read"] = get_price / 1000
    with progress("measuring") as advance:
        def step(msg: str) -> None:
            advance(1)
            if not _interactive():  # a log, not a terminal: one line per step
                click.echo(f"silt costs: measuring {msg}", err=True)
        results = run_costs(w, prices, step)
    report = costs_json(w, price_table, results)
    report["prices_per_request"] = prices
    if plot_path:
        plot(results, plot_path)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        print_table(results, report)
    if not report["client_server_agree"]:
        click.echo("silt: client and server request counts disagree", err=True)
        sys.exit(1)


@cli.command("agent")
@click.option("--listen", default=None, metavar="HOST:PORT",
              show_default=_default(AgentConfig, LISTENERS),
              help="Where to accept Kafka clients (agent.listeners).")
@click.option("--advertise", default=None, metavar="HOST:PORT",
              help="Where Metadata tells clients to connect (agent.advertised.listeners;"
                   " default: the listen address, which must then not be a wildcard such"
                   " as 0.0.0.0).")
@log_format_option
@pass_ctx
@one_line_errors
def agent_command(ctx: Context, listen: str | None, advertise: str | None,
                  log_format: str) -> None:
    """Serve the Kafka protocol: stock Kafka clients produce, fetch and list offsets.

    Runs until SIGTERM or SIGINT, then stops accepting, flushes, answers the requests it
    has read and exits 0.
    """
    import asyncio
    import gc

    from agent.protocol import serve

    settings = ctx.load({f"agent.{LISTENERS}": listen,
                         f"agent.{ADVERTISED_LISTENERS}": advertise})  # bad: one line, exit 1
    ctx.open(create=True)
    # kio's schemas (thousands of classes) are most of the heap and never freed: moved out of
    # the collector's generations, every full collection stops walking them (measured at a
    # steady 2 MiB/s of small produces: ack p99 295-331 ms instead of 359-528, p50 194-198
    # instead of 203-224, agent CPU 3.2-3.4 s instead of 3.3-3.9).
    gc.collect()
    gc.freeze()
    config = settings.agent
    # The log.level setting, lowered to info by --verbose (refused frames and limits show).
    level = logging.getLevelName(config.log_level.upper())
    configure_logging(log_format, min(level, logging.INFO) if ctx.verbose else level)
    try:
        asyncio.run(serve(ctx.store, ctx.metadata, config, settings))
    except OSError as exc:  # the listen address is taken or not ours
        click.echo(f"silt: cannot serve on {config.listeners}: {exc.strerror or exc}", err=True)
        sys.exit(1)


@cli.command()
@click.option("--listen", default=None, metavar="HOST:PORT",
              show_default=_default(AgentConfig, LISTENERS),
              help="Where the agent accepts Kafka clients (agent.listeners).")
@click.option("--advertise", default=None, metavar="HOST:PORT",
              help="What Metadata tells clients to connect to (agent.advertised.listeners).")
@log_format_option
@pass_ctx
@one_line_errors
def up(ctx: Context, listen: str | None, advertise: str | None, log_format: str) -> None:
    """Run an agent and a compactor together: a Kafka endpoint with compaction running.

    On the configured store and metadata (by default ./silt-data: SQLite and files), as
    `silt agent` and `silt compactor` child processes with the same settings. Ctrl-C or
    SIGTERM stops both cleanly (a second one kills them); exits 0 when both stopped cleanly,
    1 if either exited on its own.
    """
    from agent.config import is_wildcard
    from settings import parse_host_port

    from .up import listening, run_up

    settings = ctx.load({f"agent.{LISTENERS}": listen,
                         f"agent.{ADVERTISED_LISTENERS}": advertise})  # bad: one line, exit 1
    listen_at = parse_host_port(settings.agent.listeners)
    assert listen_at is not None  # checked by the settings
    host, port = listen_at
    endpoint = ("127.0.0.1" if is_wildcard(host) else host, port)
    if listening(*endpoint):  # else the compactor would start beside another's agent
        raise ValueError(f"cannot serve on {settings.agent.listeners}: something listens"
                         " there already")
    configure_logging(log_format, logging.INFO)
    ctx.open(create=True)  # created and marked here, so the children never race to
    ctx.close()            # create a fresh database
    agent_args = [*ctx.global_args(), "agent", "--log-format", log_format]
    agent_args += ["--listen", listen] if listen is not None else []
    agent_args += ["--advertise", advertise] if advertise is not None else []
    advertised = settings.agent.advertised_listeners or settings.agent.listeners
    ready = (f"silt up: Kafka endpoint {advertised} with compaction running; store"
             f" {settings.store.url}, metadata"
             f" {_hide_password(settings.metadata.url)}; Ctrl-C stops both")
    code = run_up(agent_args, [*ctx.global_args(), "compactor", "--log-format", log_format],
                  endpoint, ready)
    sys.exit(code)


@cli.command()
@click.option("--create-bucket", is_flag=True, help="Create the s3:// store's bucket first.")
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
@one_line_errors
def init(ctx: Context, create_bucket: bool, as_json: bool) -> None:
    """Create the metadata (schema) and the store's cluster marker; idempotent.

    The first write command (topics create, produce, agent, compactor, up, demo) does the
    same; read-only commands never create anything.
    """
    from .cluster import create_bucket as make_bucket
    from .cluster import init_report

    created = make_bucket(ctx.store_url) if create_bucket else None
    cluster = open_cluster(ctx.settings, create=True)
    cluster.metadata.close()
    report = init_report(cluster, ctx.store_url, created)
    if as_json:
        click.echo(json.dumps(report))
        return
    if created is not None:
        click.echo(f"bucket {'created' if created else 'exists already'}")
    marker = "marker written" if report["marker_written"] else "marker present"
    click.echo(f"cluster {report['cluster_id']}: store {report['store']} ({marker}),"
               f" metadata {report['metadata']}")


@cli.command()
@click.option("--records", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=1_000, show_default=True)
@pass_ctx
@one_line_errors
def demo(ctx: Context, records: int, partitions: int) -> None:
    """Run an end-to-end demo on the configured store and metadata and explain it."""
    from .demo import run_demo

    ctx.open(create=True)
    run_demo(ctx.store, ctx.metadata, ctx.store_url, ctx.metadata_url,
             records=records, partitions=partitions, echo=click.echo)


def main() -> None:
    """Console-script entry point (the process's garbage collector tuned for the produce
    path first: `agent.tune_gc`)."""
    tune_gc()
    cli(prog_name="silt")
