"""OffsetFetch (key 9): a group's committed offsets (offset, leader epoch, metadata), read
from the metadata store by whichever agent is asked (committed offsets are durable rows,
so no coordinator needs to be consulted). A partition with no commit answers offset -1;
`topics` null (v2+) asks for every committed partition; v8+ asks for several groups.
Authorization (KafkaApis): DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for it)
and on each topic: a topic asked for by name that may not be described answers
TOPIC_AUTHORIZATION_FAILED per partition, and is left out of a request for all.
require_stable (v7+, KIP-447, read_committed consumers): a partition whose offset a
transaction holds (TxnOffsetCommit, not yet committed or aborted) answers
UNSTABLE_OFFSET_COMMIT, which clients retry, as Kafka's group coordinator does."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch import v1, v2, v3, v4, v5, v6, v7, v8, v9
from kio.static.primitive import i32, i64
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from metadata import CommittedOffset

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v1.OffsetFetchRequest | v2.OffsetFetchRequest | v3.OffsetFetchRequest
           | v4.OffsetFetchRequest | v5.OffsetFetchRequest | v6.OffsetFetchRequest
           | v7.OffsetFetchRequest | v8.OffsetFetchRequest | v9.OffsetFetchRequest)
"""kio's OffsetFetchRequest of each version served (1-9)."""
Grouped = v8.OffsetFetchRequest | v9.OffsetFetchRequest  # several groups at once (v8+)
Stable = v7.OffsetFetchRequest | Grouped  # require_stable (v7+, KIP-447)


# (topic, [partition, ...]) asked for; None: all the group has.
Wanted = Sequence[tuple[str, Sequence[int]]] | None
# topic -> [(partition, committed offset or None)]
Answer = list[tuple[str, list[tuple[int, CommittedOffset | None]]]]


def fetch(ctx: ServerContext, group_id: str, wanted: Wanted) -> Answer:
    """The answer for one group (blocking: a metadata read)."""
    names = None if wanted is None else [name for name, _ in wanted]
    committed = ctx.metadata.fetch_offsets(group_id, names)
    if wanted is None:
        by_topic: dict[str, list[tuple[int, CommittedOffset | None]]] = {}
        for c in committed:
            by_topic.setdefault(c.topic, []).append((c.partition, c))
        return list(by_topic.items())
    have = {(c.topic, c.partition): c for c in committed}
    return [(name, [(p, have.get((name, p))) for p in parts]) for name, parts in wanted]


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    multi = isinstance(request, Grouped)
    asks = [(g.group_id, g.topics) for g in request.groups] if isinstance(request, Grouped) \
        else [(request.group_id, request.topics)]
    suffix = "s" if multi else ""  # v8+ names its nested classes in the plural

    def topics(answer: Answer, denied: Wanted,
               unstable: set[tuple[str, int]]) -> tuple[Entity, ...]:
        return tuple(b(f"OffsetFetchResponseTopic{suffix}", name=name, partitions=tuple(
            b(f"OffsetFetchResponsePartition{suffix}", partition_index=i32(p),
              committed_offset=i64(-1), committed_leader_epoch=i32(-1), metadata="",
              error_code=ErrorCode.unstable_offset_commit)
            if (name, p) in unstable else
            b(f"OffsetFetchResponsePartition{suffix}", partition_index=i32(p),
              committed_offset=i64(c.offset if c else -1),
              committed_leader_epoch=i32(c.leader_epoch if c else -1),
              metadata=c.metadata if c else "", error_code=ErrorCode.none)
            for p, c in parts)) for name, parts in answer) + tuple(
            b(f"OffsetFetchResponseTopic{suffix}", name=name, partitions=tuple(
                b(f"OffsetFetchResponsePartition{suffix}", partition_index=i32(p),
                  committed_offset=i64(-1), committed_leader_epoch=i32(-1), metadata="",
                  error_code=ErrorCode.topic_authorization_failed) for p in parts))
            for name, parts in denied or ())

    authz = ctx.authz
    described = authz.allowed(Operation.DESCRIBE, ResourceType.GROUP,
                               (group_id for group_id, _ in asks))
    visible = authz.decider(Operation.DESCRIBE, ResourceType.TOPIC)
    # KIP-447 (v7+): partitions with offsets a transaction holds are UNSTABLE_OFFSET_COMMIT.
    stable = isinstance(request, Stable) and request.require_stable
    # Per group: its error, the offsets of topics it may describe, the topics it may not,
    # the partitions whose offsets are not stable.
    answers: list[tuple[ErrorCode, Answer, Wanted, set[tuple[str, int]]]] = []
    for group_id, wanted in asks:
        if group_id not in described:
            answers.append((ErrorCode.group_authorization_failed, [], None, set()))
            continue
        unstable = await ctx.run(ctx.metadata.pending_group_partitions, group_id) \
            if stable else set()
        if wanted is None:  # every committed topic it may describe (the others unsaid)
            found = await ctx.run(fetch, ctx, group_id, None)
            answers.append((ErrorCode.none, [a for a in found if visible(a[0])], None,
                            unstable))
            continue
        asked = [(t.name, [int(p) for p in t.partition_indexes]) for t in wanted]
        found = await ctx.run(fetch, ctx, group_id, [a for a in asked if visible(a[0])])
        answers.append((ErrorCode.none, found, [a for a in asked if not visible(a[0])],
                        unstable))
    if multi:
        return b("OffsetFetchResponse", throttle_time=NO_THROTTLE, groups=tuple(
            b("OffsetFetchResponseGroup", group_id=group_id,
              topics=topics(found, denied, unstable), error_code=error)
            for (group_id, _), (error, found, denied, unstable)
            in zip(asks, answers, strict=True)))
    error, found, denied, unstable = answers[0]
    return b("OffsetFetchResponse", throttle_time=NO_THROTTLE,
             topics=topics(found, denied, unstable), error_code=error)
