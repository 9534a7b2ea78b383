"""`silt produce` and `silt consume`: records in and out as JSON lines (cli/jsonlines.py)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections import deque
from typing import IO

import click

from agent import Agent, AgentConfig, AgentError, Reader
from agent.config import BUFFER_MEMORY, FLUSH_BYTES, LINGER_MS
from agent.partitioner import DefaultPartitioner
from agent.producer import ProduceFuture
from settings.load import Source

from .context import Context, one_line_errors, pass_ctx, setting_default
from .interrupt import EXIT_INTERRUPTED, Interrupted, Stop, stop_on_signals
from .jsonlines import LineError, consumed_to_json, parse_produce_line
from .output import progress

FOLLOW_POLL_S = 0.5  # silt consume --follow: seconds between looks for new records


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


@click.command("produce")
@click.argument("topic")
@click.option("--file", "source", type=click.File("r"), default="-",
              help="JSON lines to produce (default: stdin).")
@click.option("--linger-ms", type=click.IntRange(min=0), default=None,
              show_default=setting_default(AgentConfig, LINGER_MS),
              help="Flush at the latest this long after the first record.")
@click.option("--flush-bytes", type=click.IntRange(min=1), default=None,
              show_default=setting_default(AgentConfig, FLUSH_BYTES),
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


@click.command("consume")
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Only this partition (default: all, one after the other).")
@click.option("--from-offset", type=click.IntRange(min=0), default=None,
              help="First offset to read (default: each partition's log start).")
@click.option("--max-records", type=click.IntRange(min=0), default=None,
              help="Stop after this many records in total.")
@click.option("--follow", is_flag=True,
              help="Then keep polling for new records until Ctrl-C or SIGTERM (exit 0).")
@click.option("--isolation", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True,
              help="Kafka's isolation.level: read_committed reads below each partition's"
                   " last stable offset and leaves aborted transactions' records out.")
@pass_ctx
@one_line_errors
def consume(ctx: Context, topic: str, partition: int | None, from_offset: int | None,
            max_records: int | None, follow: bool, isolation: str) -> None:
    """Print records of TOPIC as JSON lines, in offset order per partition (transaction
    markers are not records, as for a Kafka consumer).

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
    committed = isolation == "read_committed"
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
            for rec in reader.read(topic, p, position[p], remaining, committed=committed):
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
                    ends = {p.partition: p.last_stable_offset if committed else p.next_offset
                            for p in ctx.metadata.partitions(topic)}
                    if any(ends.get(p, 0) > position[p] for p in position):
                        read_all(stop)
        out.flush()
    except Interrupted:
        out.flush()
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly; stdout cannot be flushed at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
