"""`silt groups`: list, describe, reset the offsets of and delete consumer groups
(kafka-consumer-groups), straight from the metadata store: no agent needs to run. The
commands print JSON-ready rows and reset plans built here.

A group is as its coordinator last stored it (`MetadataStore.load_group`); a group that only
committed offsets (a "simple" consumer) is Empty with no protocol. Lag comes from the one
computation of it, `MetadataStore.group_lag`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from agent.groups import subscription
from metadata import GroupMember, MetadataStore, OffsetCommit
from metadata.errors import UnknownGroupError, UnknownPartitionError
from metadata.models import GROUP_EMPTY
from objectstore import ObjectStore

from .context import Context, one_line_errors, pass_ctx
from .output import Output, columns, json_option, shown

CONSUMER_PROTOCOL = "consumer"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def assigned_partitions(protocol_type: str | None,
                        assignment: bytes) -> list[tuple[str, int]] | None:
    """The (topic, partition) pairs a member's assignment gives it (the consumer protocol's
    encoding); None if the group uses another protocol or the bytes do not decode; [] for
    an empty assignment (none received yet)."""
    if protocol_type != CONSUMER_PROTOCOL:
        return None
    return subscription.partitions(assignment)


def _coordinator(md: MetadataStore, group_id: str) -> str | None:
    holder = md.group_coordinator(group_id)
    return None if holder is None else holder.agent_id


def list_rows(md: MetadataStore) -> list[dict[str, Any]]:
    """One row per group: id, state, protocol type, member count, live coordinator."""
    return [{"group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type,
             "members": len(g.members), "coordinator": _coordinator(md, g.group_id)}
            for g in md.list_groups()]


def _member_row(m: GroupMember, parts: list[tuple[str, int]] | None) -> dict[str, Any]:
    return {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "assignment": None if parts is None else
            [{"topic": t, "partition": p} for t, p in parts],
            "assignment_bytes": len(m.assignment)}


def describe(md: MetadataStore, group_id: str) -> dict[str, Any]:
    """The group's state, protocol, generation and members (with their decoded assignments)
    and, per partition it committed or is assigned, committed offset, log end offset, lag
    and owning member. UnknownGroupError if it has neither stored state nor offsets."""
    record = md.load_group(group_id)
    members = record.members if record is not None else ()
    protocol_type = record.protocol_type if record is not None else None
    owners: dict[tuple[str, int], str] = {}
    member_rows = []
    for m in members:
        parts = assigned_partitions(protocol_type, m.assignment)
        owners.update((tp, m.member_id) for tp in parts or ())
        member_rows.append(_member_row(m, parts))
    lag = md.group_lag(group_id, also=owners.keys())
    if record is None and not lag:
        raise UnknownGroupError(f"group {group_id!r} does not exist")
    return {
        "group_id": group_id,
        "state": record.state if record is not None else GROUP_EMPTY,
        "protocol_type": protocol_type,
        "members": len(members),
        "coordinator": _coordinator(md, group_id),
        "protocol": record.protocol_name if record is not None else None,
        "generation": record.generation if record is not None else 0,
        "leader": record.leader if record is not None else None,
        "member_detail": member_rows,
        "offsets": [{"topic": x.topic, "partition": x.partition,
                     "committed_offset": x.committed_offset,
                     "log_end_offset": x.log_end_offset, "lag": x.lag,
                     "member_id": owners.get((x.topic, x.partition))} for x in lag],
    }


@dataclass(frozen=True, slots=True)
class ResetTo:
    """Where `reset-offsets` moves a partition: "earliest" (log start), "latest" (next
    offset), "offset" (`value`, clamped into the log) or "datetime" (`value`: epoch ms)."""

    kind: str
    value: int = 0


def parse_datetime(text: str) -> int:
    """Epoch milliseconds of an ISO 8601 date-time (without a zone: UTC). ValueError if
    it is not one."""
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - EPOCH) // timedelta(milliseconds=1)


def reset_plan(md: MetadataStore, store: ObjectStore | None, group_id: str, topic: str,
               partitions: tuple[int, ...], to: ResetTo) -> list[dict[str, Any]]:
    """Per partition of `topic` (all, or those given): its committed offset (None: none)
    and the offset `to` gives it. "datetime" reads the first record at or after the time as
    ListOffsets does (no such record: the next offset, as Kafka), so it needs `store`."""
    infos = md.partitions(topic)  # UnknownTopicError
    by_number = {p.partition: p for p in infos}
    missing = sorted(set(partitions) - set(by_number))
    if missing:
        raise UnknownPartitionError(f"topic {topic!r} has no partition "
                                    + ", ".join(map(str, missing))
                                    + f" (0..{len(infos) - 1})")
    chosen = [by_number[n] for n in sorted(set(partitions))] if partitions else infos
    committed = {o.partition: o.offset for o in md.fetch_offsets(group_id, [topic])}
    cache = None
    if to.kind == "datetime":
        from agent.protocol.cache import SegmentCache

        assert store is not None, "a reset to a datetime reads records"
        cache = SegmentCache(store, 0)
    rows = []
    for p in chosen:
        if to.kind == "earliest":
            new = p.log_start_offset
        elif to.kind == "latest":
            new = p.next_offset
        elif to.kind == "offset":
            new = min(max(to.value, p.log_start_offset), p.next_offset)
        else:
            from agent.protocol.apis.list_offsets import offset_for_time

            assert cache is not None
            found = offset_for_time(md, cache, topic, p.partition, p.log_start_offset,
                                    to.value)
            new = p.next_offset if found is None else found[1]
        rows.append({"topic": topic, "partition": p.partition,
                     "current_offset": committed.get(p.partition), "new_offset": new})
    return rows


def apply_plan(md: MetadataStore, group_id: str, rows: list[dict[str, Any]]) -> None:
    """Commit the plan's offsets for the group, in one transaction, only while the group is
    empty (`MetadataStore.reset_offsets`: GroupNotEmptyError otherwise)."""
    md.reset_offsets(group_id, [OffsetCommit(r["topic"], r["partition"], r["new_offset"])
                                for r in rows])



# ---------------------------------------------------------------------------- the commands


@click.group()
def groups() -> None:
    """List, describe, reset the offsets of and delete consumer groups."""


def _list_text(rows: list[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield (f"{row['group_id']}\tstate={row['state']}"
               f"\tprotocol_type={shown(row['protocol_type'])}\tmembers={row['members']}"
               f"\tcoordinator={shown(row['coordinator'])}")


@groups.command("list")
@json_option()
@pass_ctx
@one_line_errors
def groups_list(ctx: Context, out: Output) -> None:
    """List consumer groups: state, protocol type, members, live coordinator agent."""
    out.result(list_rows(ctx.metadata), _list_text)


def _describe_text(row: dict[str, Any]) -> Iterator[str]:
    protocol = "/".join(row[k] for k in ("protocol_type", "protocol") if row[k]) or "-"
    yield (f"group {row['group_id']}  state={row['state']}  protocol={protocol}"
           f"  generation={row['generation']}  members={row['members']}"
           f"  coordinator={shown(row['coordinator'])}")
    if row["member_detail"]:
        members = [["member", "instance", "client", "host", "partitions"]]
        for m in row["member_detail"]:
            parts = (f"{m['assignment_bytes']} bytes" if m["assignment"] is None else
                     ",".join(f"{a['topic']}-{a['partition']}" for a in m["assignment"]))
            members.append([m["member_id"], shown(m["group_instance_id"]), m["client_id"],
                            m["client_host"], parts or "-"])
        yield from columns(members)
    offsets = [["topic", "partition", "committed", "end", "lag", "member"]]
    offsets += [[o["topic"], str(o["partition"]), shown(o["committed_offset"]),
                 shown(o["log_end_offset"]), shown(o["lag"]), shown(o["member_id"])]
                for o in row["offsets"]]
    yield from columns(offsets)


@groups.command("describe")
@click.argument("group")
@json_option()
@pass_ctx
@one_line_errors
def groups_describe(ctx: Context, group: str, out: Output) -> None:
    """Show a group's members and assignments and, per partition, committed offset, log end
    offset and lag."""
    out.result(describe(ctx.metadata, group), _describe_text)


def _plan_text(plan: dict[str, Any]) -> list[str]:
    table = [["topic", "partition", "current", "new"]]
    table += [[r["topic"], str(r["partition"]), shown(r["current_offset"]),
               str(r["new_offset"])] for r in plan["partitions"]]
    return columns(table, indent="")


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
@json_option()
@pass_ctx
@one_line_errors
def groups_reset_offsets(ctx: Context, group: str, topic: str, partitions: tuple[int, ...],
                         to_earliest: bool, to_latest: bool, to_offset: int | None,
                         to_datetime: str | None, execute: bool, out: Output) -> None:
    """Move a group's committed offsets on TOPIC (the group must have no members).

    Prints the plan (partition, current committed offset, new offset); only --execute
    commits it, and is refused while the group has members.
    """
    targets = [ResetTo(kind) for kind, given in
               (("earliest", to_earliest), ("latest", to_latest)) if given]
    if to_offset is not None:
        targets.append(ResetTo("offset", to_offset))
    if to_datetime is not None:
        try:
            targets.append(ResetTo("datetime", parse_datetime(to_datetime)))
        except ValueError:
            raise click.BadParameter(f"{to_datetime!r} is not an ISO 8601 date-time",
                                     param_hint="--to-datetime") from None
    if len(targets) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset,"
                               " --to-datetime")
    to = targets[0]
    store = ctx.store if to.kind == "datetime" else None
    rows = reset_plan(ctx.metadata, store, group, topic, partitions, to)
    if execute:
        apply_plan(ctx.metadata, group, rows)
    out.result({"group_id": group, "executed": execute, "partitions": rows}, _plan_text)
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
