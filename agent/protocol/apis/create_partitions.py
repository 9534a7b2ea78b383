"""CreatePartitions (key 37): grow a topic's partition count (`MetadataStore.add_partitions`;
only growing: INVALID_PARTITIONS otherwise). validate_only checks and changes nothing.
Explicit assignments are refused with INVALID_REQUEST, as CreateTopics refuses them: any
agent serves any partition. A topic named twice gets INVALID_REQUEST. A change the metadata
store did not make is that topic's REQUEST_TIMED_OUT (not applied: retry) or
UNKNOWN_SERVER_ERROR (`errors.ADMIN`).

Limits as for CreateTopics: a request adding more than max.partitions.per.request
partitions in all gets POLICY_VIOLATION for every topic (Kafka's controller bounds the
records of one request the same way), a topic growing past max.partitions POLICY_VIOLATION.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Sequence

from kio.schema.create_partitions import v0, v1, v2, v3
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from metadata.errors import UnknownTopicError

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed
from .create_topics import TOO_MANY

Request = (v0.CreatePartitionsRequest | v1.CreatePartitionsRequest | v2.CreatePartitionsRequest
           | v3.CreatePartitionsRequest)
"""kio's CreatePartitionsRequest of each version served (0-3)."""
Topic = (v0.request.CreatePartitionsTopic | v1.request.CreatePartitionsTopic
         | v2.request.CreatePartitionsTopic | v3.request.CreatePartitionsTopic)


Outcome = tuple[str, ErrorCode, str | None]


def grow_all(ctx: ServerContext, request: Request) -> list[Outcome]:
    """Grow each topic (blocking: runs in the pool)."""
    counts = Counter(t.name for t in request.topics)
    if _added(ctx, request.topics) > ctx.config.max_partitions_per_request:
        return [(t.name, ErrorCode.policy_violation, TOO_MANY) for t in request.topics]
    out: list[Outcome] = []
    for t in request.topics:
        if counts[t.name] > 1:
            out.append((t.name, ErrorCode.invalid_request,
                        f"topic {t.name!r} is named more than once"))
        elif t.assignments:
            out.append((t.name, ErrorCode.invalid_request, "replica assignments are not"
                        " supported: any agent serves any partition"))
        else:
            try:
                ctx.metadata.add_partitions(t.name, int(t.count),
                                            validate_only=bool(request.validate_only))
            except Exception as exc:
                out.append((t.name, *failed(f"growing topic {t.name!r}", exc)))
            else:
                ctx.agent.forget_topics()
                out.append((t.name, ErrorCode.none, None))
    return out


def _added(ctx: ServerContext, topics: Sequence[Topic]) -> int:
    """The partitions the request would add in all (topics it cannot grow: none)."""
    added = 0
    for t in topics:
        with contextlib.suppress(UnknownTopicError):
            added += max(0, int(t.count) - ctx.metadata.get_topic(t.name).partitions)
    return added


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    results = await ctx.run(grow_all, ctx, request)
    return b("CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(
        b("CreatePartitionsTopicResult", name=name, error_code=error, error_message=message)
        for name, error, message in results))
