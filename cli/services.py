"""The long-running commands: `silt agent`, `silt compactor` and `silt up` (both, as child
processes: cli/up.py). They log as services do (`--log-format`), not as the short commands,
and stop cleanly on SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import sys
import threading

import click

from agent import AgentConfig
from agent.config import ADVERTISED_LISTENERS, LISTENERS
from compactor.config import POLL_INTERVAL_S, CompactorConfig

from .context import Context, one_line_errors, pass_ctx, setting_default
from .logs import configure as configure_logging
from .logs import log_format_option
from .output import hide_password

# The logger these commands' lines have always named (they were in cli/main.py).
log = logging.getLogger("cli.main")

SERVICES = frozenset({"agent", "compactor", "up"})  # configure their own logging


def serve_compactor(ctx: Context, config: CompactorConfig) -> None:
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


@click.command("compactor")
@click.option("--poll-interval", type=click.FloatRange(min=0.1), default=None,
              show_default=setting_default(CompactorConfig, POLL_INTERVAL_S),
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
    serve_compactor(ctx, config)



@click.command("agent")
@click.option("--listen", default=None, metavar="LISTENERS",
              show_default=setting_default(AgentConfig, LISTENERS),
              help="Where to accept Kafka clients (agent.listeners: NAME://HOST:PORT,..."
                   " or HOST:PORT for one PLAINTEXT listener).")
@click.option("--advertise", default=None, metavar="LISTENERS",
              help="Where Metadata tells each listener's clients to connect"
                   " (agent.advertised.listeners; default: each listen address, which must"
                   " then not be a wildcard such as 0.0.0.0).")
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

    from agent.protocol import EffectiveSetting, serve
    from settings.load import Source

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
        effective = [EffectiveSetting(v.key, v.value, v.origin.source is Source.DEFAULT)
                     for v in settings.values()]  # what DescribeConfigs lists (BROKER)
        asyncio.run(serve(ctx.store, ctx.metadata, config, effective))
    except OSError as exc:  # the listen address is taken or not ours
        click.echo(f"silt: cannot serve on {config.listeners}: {exc.strerror or exc}", err=True)
        sys.exit(1)


@click.command("up")
@click.option("--listen", default=None, metavar="HOST:PORT",
              show_default=setting_default(AgentConfig, LISTENERS),
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
    from agent.listeners import endpoints_text, is_wildcard

    from .up import listening, run_up

    settings = ctx.load({f"agent.{LISTENERS}": listen,
                         f"agent.{ADVERTISED_LISTENERS}": advertise})  # bad: one line, exit 1
    first = settings.agent.listener_list()[0]  # what `silt up` waits for
    host, port = first.host, first.port
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
    advertised = endpoints_text(settings.agent.advertised())
    ready = (f"silt up: Kafka endpoint {advertised} with compaction running; store"
             f" {settings.store.url}, metadata"
             f" {hide_password(settings.metadata.url)}; Ctrl-C stops both")
    code = run_up(agent_args, [*ctx.global_args(), "compactor", "--log-format", log_format],
                  endpoint, ready)
    sys.exit(code)
