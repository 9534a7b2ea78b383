"""CreatePartitions (key 37): grow a topic's partition count (`MetadataStore.add_partitions`;
only growing: INVALID_PARTITIONS otherwise). validate_only checks and changes nothing.
Explicit assignments are refused with INVALID_REQUEST, as CreateTopics refuses them: any
agent serves any partition. A topic named twice gets INVALID_REQUEST. A change the metadata
store did not make is that topic's REQUEST_TIMED_OUT (not applied: retry) or
UNKNOWN_SERVER_ERROR (`errors.change_failed`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.errors import InvalidPartitionsError, UnknownTopicError

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import change_failed

Outcome = tuple[str, ErrorCode, str | None]


def grow_all(ctx: ServerContext, request: Any) -> list[Outcome]:
    """Grow each topic (blocking: runs in the pool)."""
    counts = Counter(t.name for t in request.topics)
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
            except UnknownTopicError as exc:
                out.append((t.name, ErrorCode.unknown_topic_or_partition, str(exc)))
            except InvalidPartitionsError as exc:
                out.append((t.name, ErrorCode.invalid_partitions, str(exc)))
            except Exception as exc:
                out.append((t.name, *change_failed(f"growing topic {t.name!r}", exc)))
            else:
                ctx.agent.forget_topics()
                out.append((t.name, ErrorCode.none, None))
    return out


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    results = await ctx.run(grow_all, ctx, request)
    return b("CreatePartitionsResponse", throttle_time=NO_THROTTLE, results=tuple(
        b("CreatePartitionsTopicResult", name=name, error_code=error, error_message=message)
        for name, error, message in results))
