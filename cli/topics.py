"""`silt topics`: create, list, describe, alter, grow, trim and delete topics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from metadata.topicconfig import AlterOp, ConfigChange

from .context import Context, one_line_errors, parse_configs, pass_ctx
from .output import Output, json_option


@click.group()
def topics() -> None:
    """Create, list, describe, alter and delete topics."""


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
    info = ctx.metadata.create_topic(name, partitions, parse_configs(configs))
    click.echo(f"created topic {info.name} with {info.partitions} partitions")


def _topic_json(ctx: Context, name: str) -> dict[str, Any]:
    info = ctx.metadata.get_topic(name)
    parts = [{"partition": p.partition, "log_start_offset": p.log_start_offset,
              "next_offset": p.next_offset, "segments": segments, "bytes": size,
              "records": records}
             for p, segments, size, records in ctx.metadata.partition_summaries(name)]
    return {"name": info.name, "partitions": info.partitions, "configs": dict(info.configs),
            "partition_detail": parts}


def _list_text(rows: list[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        policy = row["configs"].get("cleanup.policy", "delete")
        yield f"{row['name']}\tpartitions={row['partitions']}\tcleanup.policy={policy}"


@topics.command("list")
@json_option()
@pass_ctx
@one_line_errors
def topics_list(ctx: Context, out: Output) -> None:
    """List topics."""
    out.result([{"name": t.name, "partitions": t.partitions, "configs": dict(t.configs)}
                for t in ctx.metadata.list_topics()], _list_text)


def _describe_text(row: dict[str, Any]) -> Iterator[str]:
    yield f"topic {row['name']}  partitions={row['partitions']}"
    for key, value in sorted(row["configs"].items()):
        yield f"  {key}={value}"
    yield "  partition  log_start  next_offset  segments  records  bytes"
    for p in row["partition_detail"]:
        yield (f"  {p['partition']:>9}  {p['log_start_offset']:>9}  {p['next_offset']:>11}"
               f"  {p['segments']:>8}  {p['records']:>7}  {p['bytes']}")


@topics.command("describe")
@click.argument("name")
@json_option()
@pass_ctx
@one_line_errors
def topics_describe(ctx: Context, name: str, out: Output) -> None:
    """Show a topic's configs and, per partition, log start, next offset, segments, bytes."""
    out.result(_topic_json(ctx, name), _describe_text)


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
    changes = [ConfigChange(k, AlterOp.SET, v) for k, v in parse_configs(sets).items()]
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
