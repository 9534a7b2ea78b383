"""`silt transactions`: list and describe transactional ids (what kafka-transactions.sh
list / describe show), straight from the metadata store: no agent needs to run. A
transaction is as its coordinator last stored it (`MetadataStore.load_transaction`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from metadata import MetadataStore, TransactionRecord
from metadata.errors import TransactionalIdNotFoundError

from .context import Context, one_line_errors, pass_ctx
from .output import Output, columns, json_option, shown


def _coordinator(md: MetadataStore, txn_id: str) -> str | None:
    holder = md.transaction_coordinator(txn_id)
    return None if holder is None else holder.agent_id


def list_rows(md: MetadataStore) -> list[dict[str, Any]]:
    """One row per transactional id: its live coordinator, producer id and state."""
    return [{"transactional_id": r.transactional_id,
             "coordinator": _coordinator(md, r.transactional_id),
             "producer_id": r.producer_id, "state": r.state}
            for r in md.list_transactions()]


def describe(md: MetadataStore, txn_id: str) -> dict[str, Any]:
    """kafka-transactions.sh describe's fields. TransactionalIdNotFoundError if none."""
    r: TransactionRecord | None = md.load_transaction(txn_id)
    if r is None:
        raise TransactionalIdNotFoundError(f"transactional id {txn_id!r} does not exist")
    now = md.clock.now_ms()
    return {"transactional_id": txn_id, "coordinator": _coordinator(md, txn_id),
            "producer_id": r.producer_id, "producer_epoch": r.producer_epoch,
            "state": r.state, "timeout_ms": r.timeout_ms,
            "start_time_ms": r.start_ms if r.start_ms >= 0 else None,
            "duration_ms": now - r.start_ms if r.start_ms >= 0 else None,
            "partitions": [{"topic": t, "partition": p} for t, p in r.partitions],
            "groups": list(r.groups)}


@click.group()
def transactions() -> None:
    """List and describe transactional ids (kafka-transactions.sh list / describe)."""


def _list_text(rows: list[dict[str, Any]]) -> Iterator[str]:
    table = [["transactional id", "coordinator", "producer id", "state"]]
    table += [[r["transactional_id"], shown(r["coordinator"]), str(r["producer_id"]),
               r["state"]] for r in rows]
    yield from columns(table, indent="")


@transactions.command("list")
@json_option()
@pass_ctx
@one_line_errors
def transactions_list(ctx: Context, out: Output) -> None:
    """List transactional ids: live coordinator agent, producer id, state."""
    out.result(list_rows(ctx.metadata), _list_text)


def _describe_text(row: dict[str, Any]) -> Iterator[str]:
    parts = ",".join(f"{p['topic']}-{p['partition']}" for p in row["partitions"]) or "-"
    table = [["coordinator", "transactional id", "producer id", "epoch", "state",
              "timeout ms", "start time ms", "duration ms", "partitions"],
             [shown(row["coordinator"]), row["transactional_id"], str(row["producer_id"]),
              str(row["producer_epoch"]), row["state"], str(row["timeout_ms"]),
              shown(row["start_time_ms"]), shown(row["duration_ms"]), parts]]
    yield from columns(table, indent="")


@transactions.command("describe")
@click.argument("transactional_id")
@json_option()
@pass_ctx
@one_line_errors
def transactions_describe(ctx: Context, transactional_id: str, out: Output) -> None:
    """Show a transactional id's producer id and epoch, state, timeout, how long its
    transaction has run and its partitions."""
    out.result(describe(ctx.metadata, transactional_id), _describe_text)
