"""OffsetFetch (key 9): a group's committed offsets (offset, leader epoch, metadata), read
from the metadata store by whichever agent is asked (committed offsets are durable rows,
so no coordinator needs to be consulted). A partition with no commit answers offset -1;
`topics` null (v2+) asks for every committed partition; v8+ asks for several groups."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch import v1, v2, v3, v4, v5, v6, v7, v8, v9
from kio.static.primitive import i32, i64
from kio.static.protocol import Entity, RequestHeader

from metadata import CommittedOffset

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v1.OffsetFetchRequest | v2.OffsetFetchRequest | v3.OffsetFetchRequest
           | v4.OffsetFetchRequest | v5.OffsetFetchRequest | v6.OffsetFetchRequest
           | v7.OffsetFetchRequest | v8.OffsetFetchRequest | v9.OffsetFetchRequest)
"""kio's OffsetFetchRequest of each version served (1-9)."""
Grouped = v8.OffsetFetchRequest | v9.OffsetFetchRequest  # several groups at once (v8+)


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

    def topics(answer: Answer) -> tuple[Entity, ...]:
        return tuple(b(f"OffsetFetchResponseTopic{suffix}", name=name, partitions=tuple(
            b(f"OffsetFetchResponsePartition{suffix}", partition_index=i32(p),
              committed_offset=i64(c.offset if c else -1),
              committed_leader_epoch=i32(c.leader_epoch if c else -1),
              metadata=c.metadata if c else "", error_code=ErrorCode.none)
            for p, c in parts)) for name, parts in answer)

    answers = []
    for group_id, wanted in asks:
        want = None if wanted is None else [(t.name, [int(p) for p in t.partition_indexes])
                                            for t in wanted]
        answers.append(await ctx.run(fetch, ctx, group_id, want))
    if multi:
        return b("OffsetFetchResponse", throttle_time=NO_THROTTLE, groups=tuple(
            b("OffsetFetchResponseGroup", group_id=group_id, topics=topics(answer),
              error_code=ErrorCode.none)
            for (group_id, _), answer in zip(asks, answers, strict=True)))
    return b("OffsetFetchResponse", throttle_time=NO_THROTTLE, topics=topics(answers[0]),
             error_code=ErrorCode.none)
