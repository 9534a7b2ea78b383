"""What `silt groups` shows and changes (kafka-consumer-groups), straight from the metadata
store: no agent needs to run. The click commands are in main.py; this module builds their
JSON-ready rows and reset plans.

A group is as its coordinator last stored it (`MetadataStore.load_group`); a group that only
committed offsets (a "simple" consumer) is Empty with no protocol. Lag comes from the one
computation of it, `MetadataStore.group_lag`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from agent.groups import subscription
from metadata import GroupMember, MetadataStore, OffsetCommit
from metadata.errors import UnknownGroupError, UnknownPartitionError
from metadata.models import GROUP_EMPTY
from objectstore import ObjectStore

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


def columns(rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Rows of cells as left-aligned columns two spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            .rstrip() for row in rows]
