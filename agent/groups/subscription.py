"""The consumer protocol's opaque bytes (what "consumer" group members put in JoinGroup
metadata and SyncGroup assignments), decoded with kio: a member's subscribed topics
(OffsetDelete refuses subscribed topics) and an assignment's partitions (`silt groups
describe`). Each starts with its int16 version; versions newer than kio knows are read as
the newest it knows (later versions only append fields, as in Kafka's ConsumerProtocol)."""

from __future__ import annotations

import struct
from typing import Any

from kio.schema.consumer_protocol_assignment import v0 as a0
from kio.schema.consumer_protocol_assignment import v1 as a1
from kio.schema.consumer_protocol_assignment import v2 as a2
from kio.schema.consumer_protocol_assignment import v3 as a3
from kio.schema.consumer_protocol_subscription import v0 as s0
from kio.schema.consumer_protocol_subscription import v1 as s1
from kio.schema.consumer_protocol_subscription import v2 as s2
from kio.schema.consumer_protocol_subscription import v3 as s3
from kio.serial import entity_reader

_VERSION = struct.Struct(">h")
_SUBSCRIPTIONS: list[type[Any]] = [m.ConsumerProtocolSubscription for m in (s0, s1, s2, s3)]
_ASSIGNMENTS: list[type[Any]] = [m.ConsumerProtocolAssignment for m in (a0, a1, a2, a3)]


def _read(classes: list[type[Any]], data: bytes) -> Any:
    """The entity `data` holds, or None if it is not one (empty, or garbage)."""
    if len(data) < _VERSION.size:
        return None
    version = _VERSION.unpack_from(data)[0]
    if version < 0:
        return None
    try:
        return entity_reader(classes[min(version, len(classes) - 1)])(data, _VERSION.size)[0]
    except Exception:  # a client's bytes we cannot read: treated as unknown
        return None


def topics(metadata: bytes) -> set[str] | None:
    """The topics a consumer-protocol subscription names; None if unreadable."""
    sub = _read(_SUBSCRIPTIONS, metadata)
    return None if sub is None else set(sub.topics)


def partitions(assignment: bytes) -> list[tuple[str, int]] | None:
    """The (topic, partition) pairs of a consumer-protocol assignment, sorted; [] for no
    assignment (none received yet), None if the bytes do not decode."""
    if not assignment:
        return []
    got = _read(_ASSIGNMENTS, assignment)
    if got is None:
        return None
    return sorted((tp.topic, int(p)) for tp in got.assigned_partitions for p in tp.partitions)
