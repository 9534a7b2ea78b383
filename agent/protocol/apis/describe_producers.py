"""DescribeProducers (key 61): each partition's active idempotent producers, from their
state in the metadata store (`MetadataStore.partition_producers`: those not expired past
producer.id.expiration.ms), as Kafka's ProducerStateManager lists them: id, epoch, the last
sequence of its last batch, last timestamp (here the time its last batch was committed:
the store keeps no record timestamps for producers), coordinator epoch and transaction
start -1 (no transaction open). Any agent answers for any partition (leaderless: no
NOT_LEADER_OR_FOLLOWER); one of no topic or past its count is UNKNOWN_TOPIC_OR_PARTITION.
READ on the topic is needed (else TOPIC_AUTHORIZATION_FAILED per partition).
"""

from __future__ import annotations

from kio.schema.describe_producers import v0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from metadata import ProducerState
from metadata.errors import UnknownTopicError

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import failed

Request = v0.DescribeProducersRequest
"""kio's DescribeProducersRequest of the version served (0)."""

Found = dict[tuple[str, int], "list[ProducerState] | ErrorCode"]


def producers(ctx: ServerContext, request: Request, readable: set[str]) -> Found:
    """Each asked-for partition's producers or error (blocking: metadata reads); those of
    topics not `readable` (no READ on them) TOPIC_AUTHORIZATION_FAILED, before their
    existence is checked (KafkaApis)."""
    out: Found = {}
    for t in request.topics:
        if t.name not in readable:
            out.update(((t.name, int(p)), ErrorCode.topic_authorization_failed)
                       for p in t.partition_indexes)
            continue
        try:
            count = ctx.metadata.get_topic(t.name).partitions
        except UnknownTopicError:
            count = 0
        for p in t.partition_indexes:
            index = int(p)
            if not 0 <= index < count:
                out[(t.name, index)] = ErrorCode.unknown_topic_or_partition
                continue
            try:
                out[(t.name, index)] = ctx.metadata.partition_producers(t.name, index)
            except Exception as exc:
                out[(t.name, index)] = failed(f"describing producers of {t.name}/{index}",
                                              exc)[0]
    return out


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    readable = ctx.authz.allowed(Operation.READ, ResourceType.TOPIC,
                                 (t.name for t in request.topics))
    found = await ctx.run(producers, ctx, request, readable)

    def partition(name: str, index: int) -> Entity:
        states = found[(name, index)]
        if isinstance(states, ErrorCode):
            return b("PartitionResponse", partition_index=i32(index), error_code=states,
                     error_message=None, active_producers=())
        return b("PartitionResponse", partition_index=i32(index), error_code=ErrorCode.none,
                 error_message=None, active_producers=tuple(
                     b("ProducerState", producer_id=i64(st.producer_id),
                       producer_epoch=i32(st.epoch),
                       last_sequence=i32(st.batches[-1].last_seq if st.batches else -1),
                       last_timestamp=i64(st.updated_at_ms), coordinator_epoch=i32(-1),
                       current_txn_start_offset=i64(-1))
                     for st in states))

    return b("DescribeProducersResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b("TopicResponse", name=t.name, partitions=tuple(
            partition(t.name, int(p)) for p in t.partition_indexes))
        for t in request.topics))
