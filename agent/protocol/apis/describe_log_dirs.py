"""DescribeLogDirs (key 35): the object store as this agent's one log dir (named by the
store's URL). Every live agent serves every partition (Metadata lists each as a replica), so
each lists every partition asked for (every topic's when topics is null; topics and
partitions that do not exist are left out, as Kafka leaves out what a broker does not host),
each partition's size the bytes of its live segments from its log start (the metadata
store's sums, `MetadataStore.partition_summaries`), offset lag 0 (no follower to lag) and
never a future replica. The store's total and usable bytes are unknown (-1, Kafka's
UNKNOWN_VOLUME_BYTES).
DESCRIBE on the cluster is needed (else CLUSTER_AUTHORIZATION_FAILED, no results).
"""

from __future__ import annotations

from kio.schema.describe_log_dirs import v1, v2, v3, v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from metadata.errors import UnknownTopicError

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = (v1.DescribeLogDirsRequest | v2.DescribeLogDirsRequest | v3.DescribeLogDirsRequest
           | v4.DescribeLogDirsRequest)
"""kio's DescribeLogDirsRequest of each version served (1-4)."""

# Per topic: (partition, bytes) of those that exist and were asked for.
Sizes = list[tuple[str, list[tuple[int, int]]]]


def sizes(ctx: ServerContext, request: Request) -> Sizes:
    """Each asked-for partition's size (blocking: metadata reads, two per topic)."""
    wanted: dict[str, set[int] | None] = {}
    if request.topics is None:
        wanted = dict.fromkeys((t.name for t in ctx.metadata.list_topics()), None)
    else:
        for t in request.topics:
            parts = wanted.get(t.topic) or set()
            wanted[t.topic] = parts | {int(p) for p in t.partitions}
    out: Sizes = []
    for name, partitions in wanted.items():
        try:
            summaries = ctx.metadata.partition_summaries(name)
        except UnknownTopicError:
            continue
        out.append((name, [(info.partition, nbytes) for info, _, nbytes, _ in summaries
                           if partitions is None or info.partition in partitions]))
    return out


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return b("DescribeLogDirsResponse", throttle_time=NO_THROTTLE,
                 error_code=ErrorCode.cluster_authorization_failed, results=())
    found = await ctx.run(sizes, ctx, request)
    topics = tuple(b("DescribeLogDirsTopic", name=name, partitions=tuple(
        b("DescribeLogDirsPartition", partition_index=i32(p), partition_size=i64(size),
          offset_lag=i64(0), is_future_key=False) for p, size in parts))
        for name, parts in found if parts)
    return b("DescribeLogDirsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
             results=(b("DescribeLogDirsResult", error_code=ErrorCode.none,
                        log_dir=ctx.store.url, topics=topics, total_bytes=i64(-1),
                        usable_bytes=i64(-1)),))
