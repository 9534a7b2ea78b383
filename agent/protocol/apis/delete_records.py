"""DeleteRecords (key 21): move partitions' log start offsets up
(`MetadataStore.delete_records`, retention's path: segments wholly below stop being live);
-1 means the high watermark. Per partition: the new low watermark, or
OFFSET_OUT_OF_RANGE (above the high watermark), UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from metadata.errors import (
    MetadataError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    UnknownTopicError,
)

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext


def _code(result: int | MetadataError) -> tuple[ErrorCode, int]:
    match result:
        case int():
            return ErrorCode.none, result
        case OffsetOutOfRangeError():
            return ErrorCode.offset_out_of_range, -1
        case UnknownTopicError() | UnknownPartitionError():
            return ErrorCode.unknown_topic_or_partition, -1
    return ErrorCode.kafka_storage_error, -1


def delete_all(ctx: ServerContext, request: Any) -> dict[tuple[str, int], int | MetadataError]:
    """Move every partition's log start in one transaction (blocking: runs in the pool)."""
    return ctx.metadata.delete_records({(t.name, int(p.partition_index)): int(p.offset)
                                        for t in request.topics for p in t.partitions})


async def handle(ctx: ServerContext, header: Any, request: Any, b: Builder) -> Any:
    results = await ctx.run(delete_all, ctx, request)

    def partition(name: str, index: int) -> Any:
        error, low = _code(results[(name, index)])
        return b("DeleteRecordsPartitionResult", partition_index=i32(index),
                 low_watermark=i64(low), error_code=error)

    return b("DeleteRecordsResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b("DeleteRecordsTopicResult", name=t.name, partitions=tuple(
            partition(t.name, int(p.partition_index)) for p in t.partitions))
        for t in request.topics))
