"""AddPartitionsToTxn (key 24): the client versions (0-3) and the brokers' batched ones
(4-5), as Kafka's KafkaApis serves them.

v0-3: the partitions join the transactional id's ongoing transaction (agent/transactions/),
stored before the answer. A partition that does not exist fails the whole request: it gets
UNKNOWN_TOPIC_OR_PARTITION and every other OPERATION_NOT_ATTEMPTED. The coordinator's
answer (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, ...) is every
partition's; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2. WRITE on the
transactional id (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each
topic (else TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED).

v4-5 (KIP-890: a broker asks the coordinator for many transactions at once): CLUSTER_ACTION
on the cluster (else the top-level CLUSTER_AUTHORIZATION_FAILED and no results); each
transaction is added as above, or, `verify_only`, checked (Kafka's
handleVerifyPartitionsInTransaction: NONE where the partition is in the ongoing
transaction, else TRANSACTION_ABORTABLE). Agents do not send it (each verifies its own
produces, agent/transactions/coordinator.py `verify`); another broker-like caller may.
"""

from __future__ import annotations

from kio.schema.add_partitions_to_txn import v0, v1, v2, v3, v4, v5
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import CLUSTER_NAME, Operation, ResourceType
from agent.transactions.transitions import AddPartitions

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import fenced_as, named

Client = (v0.AddPartitionsToTxnRequest | v1.AddPartitionsToTxnRequest
          | v2.AddPartitionsToTxnRequest | v3.AddPartitionsToTxnRequest)
Batched = v4.AddPartitionsToTxnRequest | v5.AddPartitionsToTxnRequest
Request = Client | Batched
"""kio's AddPartitionsToTxnRequest of each version served (0-5)."""
FENCED_SINCE = 2
BATCHED_SINCE = 4  # v4+: brokers' batched requests

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


Errors = dict[tuple[str, int], ErrorCode]


async def _one(ctx: ServerContext, version: int, transactional_id: str, producer_id: int,
               producer_epoch: int, partitions: list[tuple[str, int]],
               verify_only: bool = False) -> Errors:
    """One transaction's partitions' errors (WRITE checked only for the client versions,
    as Kafka: the batched ones come from brokers, authorized by CLUSTER_ACTION)."""
    authz = ctx.authz
    client = version < BATCHED_SINCE
    if client and not authz.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                   transactional_id):
        return dict.fromkeys(partitions, E.transactional_id_authorization_failed)
    denied: set[tuple[str, int]] = set()
    if client:
        writable = authz.allowed(Operation.WRITE, ResourceType.TOPIC,
                                 {t for t, _ in partitions})
        denied = {tp for tp in partitions if tp[0] not in writable}
    missing = await ctx.run(_missing, ctx, [tp for tp in partitions if tp not in denied])
    if denied or missing:
        return {tp: E.topic_authorization_failed if tp in denied
                else E.unknown_topic_or_partition if tp in missing
                else E.operation_not_attempted for tp in partitions}
    if verify_only:
        if not transactional_id:  # Kafka's coordinator: no id to verify against
            return dict.fromkeys(partitions, E.invalid_request)
        return dict(await ctx.txns.verify(transactional_id, producer_id, producer_epoch,
                                          partitions))
    reply = await ctx.txns.request(transactional_id, AddPartitions(
        producer_id, producer_epoch, tuple(partitions)))
    return dict.fromkeys(partitions, fenced_as(reply.error, version, FENCED_SINCE))


def _topic_results(b: Builder, errors: Errors) -> tuple[Entity, ...]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in errors:
        by_topic.setdefault(topic, []).append(partition)
    return tuple(
        b("AddPartitionsToTxnTopicResult", name=topic, results_by_partition=tuple(
            b("AddPartitionsToTxnPartitionResult", partition_index=i32(p),
              partition_error_code=errors[(topic, p)]) for p in ps))
        for topic, ps in by_topic.items())


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    if isinstance(request, Batched):
        return await _batched(ctx, request, b)
    partitions = [(str(t.name), int(p)) for t in request.v3_and_below_topics
                  for p in t.partitions]
    errors = await _one(ctx, request.__version__, request.v3_and_below_transactional_id,
                        int(request.v3_and_below_producer_id),
                        int(request.v3_and_below_producer_epoch), partitions)
    return b("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE,
             results_by_topic_v3_and_below=_topic_results(b, errors))


async def _batched(ctx: ServerContext, request: Batched, b: Builder) -> Entity:
    if not ctx.authz.allows(Operation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return b("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE,
                 error_code=E.cluster_authorization_failed, results_by_transaction=())
    results = []
    for txn in request.transactions:
        partitions = [(str(t.name), int(p)) for t in txn.topics for p in t.partitions]
        errors = await _one(ctx, request.__version__, txn.transactional_id,
                            int(txn.producer_id), int(txn.producer_epoch), partitions,
                            verify_only=bool(txn.verify_only))
        results.append(b("AddPartitionsToTxnResult", transactional_id=txn.transactional_id,
                         topic_results=_topic_results(b, errors)))
    return b("AddPartitionsToTxnResponse", throttle_time=NO_THROTTLE, error_code=E.none,
             results_by_transaction=tuple(results))
