"""AddPartitionsToTxn (key 24), the client versions (0-3): the partitions join the
transactional id's ongoing transaction (agent/transactions/), stored before the answer.
A partition that does not exist fails the whole request as Kafka's KafkaApis does: it gets
UNKNOWN_TOPIC_OR_PARTITION and every other OPERATION_NOT_ATTEMPTED. The coordinator's
answer (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, ...) is every
partition's; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2. v4+ (brokers' batched
verification) is not served: every agent verifies produces itself.
WRITE on the transactional id (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
and on each topic (else TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED).
"""

from __future__ import annotations

from kio.schema.add_partitions_to_txn import v0, v1, v2, v3
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from agent.transactions.transitions import AddPartitions

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import fenced_as, named

Request = (v0.AddPartitionsToTxnRequest | v1.AddPartitionsToTxnRequest
           | v2.AddPartitionsToTxnRequest | v3.AddPartitionsToTxnRequest)
"""kio's AddPartitionsToTxnRequest of each version served (0-3)."""
FENCED_SINCE = 2

E = ErrorCode


def _missing(ctx: ServerContext, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
    """The partitions that do not exist (blocking: topic lookups, cached by the agent)."""
    out = set()
    for topic, partition in partitions:
        try:
            ctx.agent.partition_topic(topic, partition)
        except Exception as exc:
            if named(type(exc)) is not E.unknown_topic_or_partition:
                raise
            out.add((topic, partition))
    return out


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    topics = request.v3_and_below_topics
    partitions = [(t.name, int(p)) for t in topics for p in t.partitions]
    authz = ctx.authz
    denied: set[tuple[str, int]] = set()
    missing: set[tuple[str, int]] = set()
    txn_denied = not authz.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                  request.v3_and_below_transactional_id)
    if not txn_denied:
        writable = authz.allowed(Operation.WRITE, ResourceType.TOPIC, (t.name for t in topics))
        denied = {tp for tp in partitions if tp[0] not in writable}
        missing = await ctx.run(_missing, ctx, [tp for tp in partitions if tp not in denied])
    if txn_denied:
        errors = dict.fromkeys(partitions, E.transactional_id_authorization_failed)
    elif denied or missing:
        errors = {tp: E.topic_authorization_failed if tp in denied
                  else E.unknown_topic_or_partition if tp in missing
                  else E.operation_not_attempted for tp in partitions}
    else:
        reply = await ctx.txns.request(request.v3_and_below_transactional_id, AddPartitions(
            int(request.v3_and_below_producer_id), int(request.v3_and_below_producer_epoch),
            tuple(partitions)))
        error = fenced_as(reply.error, request.__version__, FENCED_SINCE)
        errors = dict.fromkeys(partitions, error)
    return b("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE,
             results_by_topic_v3_and_below=tuple(
                 b("AddPartitionsToTxnTopicResult", name=t.name, results_by_partition=tuple(
                     b("AddPartitionsToTxnPartitionResult", partition_index=i32(p),
                       partition_error_code=errors[(t.name, int(p))])
                     for p in t.partitions))
                 for t in topics))
