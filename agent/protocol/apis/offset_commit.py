"""OffsetCommit (key 8): a group's offsets, stored in one metadata transaction (one row
per partition) after the coordinator checked the member and generation as Kafka does; a
"simple" consumer (generation -1, no member id) may commit into an empty group. A
partition that does not exist gets UNKNOWN_TOPIC_OR_PARTITION, a metadata string over
offset.metadata.max.bytes OFFSET_METADATA_TOO_LARGE; the others are committed.
Authorization (KafkaApis): READ on the group (else every partition GROUP_AUTHORIZATION_
FAILED) and on each topic (else its partitions TOPIC_AUTHORIZATION_FAILED, uncommitted)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.schema.offset_commit import v2, v3, v4, v5, v6, v7, v8, v9
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from metadata import OffsetCommit

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v2.OffsetCommitRequest | v3.OffsetCommitRequest | v4.OffsetCommitRequest
           | v5.OffsetCommitRequest | v6.OffsetCommitRequest | v7.OffsetCommitRequest
           | v8.OffsetCommitRequest | v9.OffsetCommitRequest)
"""kio's OffsetCommitRequest of each version served (2-9)."""
Static = v7.OffsetCommitRequest | v8.OffsetCommitRequest | v9.OffsetCommitRequest  # (v7+)


class _Partition(Protocol):
    """A partition entry of OffsetCommit or TxnOffsetCommit, any version."""

    @property
    def partition_index(self) -> int: ...
    @property
    def committed_offset(self) -> int: ...
    @property
    def committed_metadata(self) -> str | None: ...


class _Topic(Protocol):
    """A topic entry of OffsetCommit or TxnOffsetCommit, any version."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[_Partition]: ...


def committed_offsets(topics: Iterable[_Topic]) -> list[OffsetCommit]:
    """The offsets a commit request (OffsetCommit, TxnOffsetCommit) carries, each with its
    leader epoch (-1 in the versions that have none: OffsetCommit before v6, TxnOffsetCommit
    before v2)."""
    return [OffsetCommit(t.name, int(p.partition_index), int(p.committed_offset),
                         int(getattr(p, "committed_leader_epoch", -1)), p.committed_metadata)
            for t in topics for p in t.partitions]


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    authz = ctx.authz
    errors: dict[tuple[str, int], ErrorCode]
    if not authz.allows(Operation.READ, ResourceType.GROUP, request.group_id):
        errors = dict.fromkeys(((t.name, int(p.partition_index)) for t in request.topics
                                for p in t.partitions), ErrorCode.group_authorization_failed)
    else:
        readable = authz.allowed(Operation.READ, ResourceType.TOPIC,
                                 (t.name for t in request.topics))
        offsets = [o for o in committed_offsets(request.topics) if o.topic in readable]
        errors = dict.fromkeys(((t.name, int(p.partition_index)) for t in request.topics
                                if t.name not in readable for p in t.partitions),
                               ErrorCode.topic_authorization_failed)
        if offsets:  # Kafka asks the coordinator only for what it may commit
            errors.update(await ctx.groups.commit(
                request.group_id, int(request.generation_id_or_member_epoch),
                request.member_id,
                request.group_instance_id if isinstance(request, Static) else None, offsets))
    return b("OffsetCommitResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b("OffsetCommitResponseTopic", name=t.name, partitions=tuple(
            b("OffsetCommitResponsePartition", partition_index=i32(p.partition_index),
              error_code=errors[(t.name, int(p.partition_index))])
            for p in t.partitions))
        for t in request.topics))
