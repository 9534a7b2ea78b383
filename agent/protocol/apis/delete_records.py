"""DeleteRecords (key 21): move partitions' log start offsets up
(`MetadataStore.delete_records`, retention's path: segments wholly below stop being live);
-1 means the high watermark. Per partition: the new low watermark, or
OFFSET_OUT_OF_RANGE (above the high watermark), UNKNOWN_TOPIC_OR_PARTITION, or
POLICY_VIOLATION (the topic's cleanup.policy lacks `delete`, as Kafka refuses it). A
commit the metadata store did not make is every partition's REQUEST_TIMED_OUT (not applied:
retry) or UNKNOWN_SERVER_ERROR (`errors.ADMIN`).
DELETE on the topic is needed (else TOPIC_AUTHORIZATION_FAILED per partition, untouched).
"""

from __future__ import annotations

from collections.abc import Mapping

from kio.schema.delete_records import v0, v1, v2
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed

Request = (v0.DeleteRecordsRequest | v1.DeleteRecordsRequest | v2.DeleteRecordsRequest)
"""kio's DeleteRecordsRequest of each version served (0-2)."""


# Per partition: its new low watermark, or its error (the response carries no message).
Results = Mapping[tuple[str, int], "int | ErrorCode"]


def _code(result: int | Exception) -> int | ErrorCode:
    return result if isinstance(result, int) else failed("deleting records", result)[0]


def delete_all(ctx: ServerContext, request: Request, deletable: set[str]) -> Results:
    """Move every partition's log start in one transaction (blocking: runs in the pool);
    partitions of topics not `deletable` (no DELETE on them) answer
    TOPIC_AUTHORIZATION_FAILED, before their existence is checked (KafkaApis)."""
    denied: Results = {(t.name, int(p.partition_index)): ErrorCode.topic_authorization_failed
                       for t in request.topics if t.name not in deletable
                       for p in t.partitions}
    offsets: dict[tuple[str, int], int] = {(t.name, int(p.partition_index)): int(p.offset)
               for t in request.topics if t.name in deletable for p in t.partitions}
    if not offsets:
        return denied
    try:
        results = ctx.metadata.delete_records(offsets)
    except Exception as exc:
        return {**dict.fromkeys(offsets, failed("deleting records", exc)[0]), **denied}
    return {**{tp: _code(result) for tp, result in results.items()}, **denied}


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    deletable = ctx.authz.allowed(Operation.DELETE, ResourceType.TOPIC,
                                  (t.name for t in request.topics))
    results = await ctx.run(delete_all, ctx, request, deletable)
    ctx.notify_commit()  # this agent's fetches see the new log starts before the reply

    def partition(name: str, index: int) -> Entity:
        result = results[(name, index)]
        error, low = (result, -1) if isinstance(result, ErrorCode) else (ErrorCode.none, result)
        return b("DeleteRecordsPartitionResult", partition_index=i32(index),
                 low_watermark=i64(low), error_code=error)

    return b("DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b("DeleteRecordsTopicResult", name=t.name, partitions=tuple(
            partition(t.name, int(p.partition_index)) for p in t.partitions))
        for t in request.topics))
