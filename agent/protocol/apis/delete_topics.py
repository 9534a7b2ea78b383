"""DeleteTopics (key 20): topics deleted from the metadata store (`MetadataStore.delete_topic`:
their objects are retired for GC, their partitions and producer state go), by name, or by
topic id in v6 (UNKNOWN_TOPIC_ID if no topic has it). A topic named twice in one request
gets INVALID_REQUEST, as Kafka answers duplicates. The deleting agent forgets the topic at
once (its produces then get UNKNOWN_TOPIC_OR_PARTITION). A deletion the metadata store did
not make is that topic's REQUEST_TIMED_OUT (not applied: retry) or UNKNOWN_SERVER_ERROR
(`errors.ADMIN`). DELETE on the topic is needed (and DESCRIBE to be told about one named by
id): else TOPIC_AUTHORIZATION_FAILED, as KafkaApis answers.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable

from kio.schema.delete_topics import v1, v2, v3, v4, v5, v6
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed

Request = (v1.DeleteTopicsRequest | v2.DeleteTopicsRequest | v3.DeleteTopicsRequest
           | v4.DeleteTopicsRequest | v5.DeleteTopicsRequest | v6.DeleteTopicsRequest)
"""kio's DeleteTopicsRequest of each version served (1-6)."""


DENIED = "Authorization failed."
# (name, topic id, error, message) of one topic of the request.
Outcome = tuple[str | None, uuid.UUID | None, ErrorCode, str | None]


def _wanted(request: Request) -> list[tuple[str | None, uuid.UUID | None]]:
    if hasattr(request, "topics"):  # v6: names or ids
        return [(t.name, t.topic_id) for t in request.topics]
    return [(name, None) for name in request.topic_names]


def delete_all(ctx: ServerContext, request: Request, described: Callable[[str], bool],
               deletable: Callable[[str], bool]) -> list[Outcome]:
    """Delete each topic asked for (blocking: runs in the pool). One named by an id it may
    not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED without its name, one it may not DELETE
    TOPIC_AUTHORIZATION_FAILED, both before its existence is checked (KafkaApis)."""
    wanted = _wanted(request)
    counts = Counter(name or topic_id for name, topic_id in wanted)
    try:
        by_id = {ctx.topic_id(t): t.name for t in ctx.metadata.list_topics()} if any(
            name is None for name, _ in wanted) else {}
    except Exception as exc:
        code, message = failed("listing topics to delete", exc)
        return [(name, topic_id, code, message) for name, topic_id in wanted]
    out: list[Outcome] = []
    for name, topic_id in wanted:
        if counts[name or topic_id] > 1:
            out.append((name, topic_id, ErrorCode.invalid_request,
                        f"topic {name or topic_id} is named more than once"))
            continue
        if name is None:
            name = by_id.get(topic_id) if topic_id is not None else None
            if name is None:
                out.append((None, topic_id, ErrorCode.unknown_topic_id,
                            f"no topic has id {topic_id}"))
                continue
            if not described(name):
                out.append((None, topic_id, ErrorCode.topic_authorization_failed, DENIED))
                continue
        if not deletable(name):
            out.append((name, topic_id, ErrorCode.topic_authorization_failed, DENIED))
            continue
        try:
            info = ctx.metadata.delete_topic(name)
        except Exception as exc:
            out.append((name, topic_id, *failed(f"deleting topic {name!r}", exc)))
            continue
        ctx.agent.forget_topics()
        out.append((name, ctx.topic_id(info), ErrorCode.none, None))
    return out


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    authz = ctx.authz
    results = await ctx.run(delete_all, ctx, request,
                            authz.decider(Operation.DESCRIBE, ResourceType.TOPIC),
                            authz.decider(Operation.DELETE, ResourceType.TOPIC))
    ctx.notify_commit()  # this agent's fetches see the topics gone before the reply
    return b("DeleteTopicsResponse", throttle_time=NO_THROTTLE, responses=tuple(
        b("DeletableTopicResult", name=name, topic_id=topic_id or uuid.UUID(int=0),
          error_code=error, error_message=message)
        for name, topic_id, error, message in results))
