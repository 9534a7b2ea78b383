"""The `silt` command: its global options, and its commands, one module per concern.

Settings come from `settings.load`: defaults < `--config FILE` (TOML) < `SILT_*` variables
< flags. Errors are one line on stderr with exit 1; usage errors (including flags a command
would ignore) exit 2 (click's convention). Every command a script may read has `--json`
(cli/output.py).
"""

from __future__ import annotations

from pathlib import Path

import click

from agent import tune_gc
from metadata.config import ENV_URL as METADATA_ENV
from metadata.config import MetadataConfig
from objectstore.config import ENV_URL as STORE_ENV
from objectstore.config import URL, StoreConfig

from . import (
    acls,
    compaction,
    config,
    costs_command,
    demo,
    groups,
    ops,
    records,
    services,
    topics,
    transactions,
    users,
)
from .context import Context, setting_default
from .logs import configure_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_path", default=None, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Settings file (TOML): tables store, metadata, agent, compactor, planner.")
@click.option("--store", default=None, metavar="URL",
              show_default=setting_default(StoreConfig, URL),
              help=f"Object store URL (file://, memory://, s3://bucket/prefix, any fsspec"
                   f" URL). Env: {STORE_ENV}.")
@click.option("--metadata", default=None, metavar="URL",
              show_default=setting_default(MetadataConfig, URL),
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
    if ctx.invoked_subcommand not in services.SERVICES:  # those configure their own logging
        configure_command(ctx.invoked_subcommand, verbose)
    ctx.obj = obj
    ctx.call_on_close(obj.close)


for command in (
    config.config, topics.topics, groups.groups, acls.acls,          # admin
    transactions.transactions,
    users.users,
    records.produce, records.consume,                                # records in and out
    ops.init, ops.stats, ops.retention, ops.gc, ops.doctor,          # one-off operations
    compaction.plan, compaction.compact,                             # compaction
    services.agent_command, services.compactor, services.up,         # services
    demo.demo, costs_command.costs,                                  # tours and measures
):
    cli.add_command(command)


def main() -> None:
    """Console-script entry point (the process's garbage collector tuned for the produce
    path first: `agent.tune_gc`)."""
    tune_gc()
    cli(prog_name="silt")
