"""TxnOffsetCommit (key 28): a group's offsets held by a transaction until it commits (sent
to the group's coordinator, which checks the member and generation as for OffsetCommit,
v3+; a "simple" producer's generation -1 into a group nobody uses creates it). The
transaction's producer is checked with its offsets' write (metadata/txnstate.py): unknown
or another producer id INVALID_PRODUCER_ID_MAPPING, an older epoch INVALID_PRODUCER_EPOCH
(Kafka's verification answers it so to every version), the group not added by
AddOffsetsToTxn INVALID_TXN_STATE, a transaction completing CONCURRENT_TRANSACTIONS.
Served to v4 (v5 adds the group implicitly, transactions V2, not served).
WRITE on the transactional id, READ on the group and on each topic are needed (else
TRANSACTIONAL_ID_, GROUP_ or, per partition, TOPIC_AUTHORIZATION_FAILED), as KafkaApis.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.txn_offset_commit import v0, v1, v2, v3, v4
from kio.static.primitive import i32
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext
from ..errors import fenced_as
from .offset_commit import committed_offsets

Request = (v0.TxnOffsetCommitRequest | v1.TxnOffsetCommitRequest
           | v2.TxnOffsetCommitRequest | v3.TxnOffsetCommitRequest
           | v4.TxnOffsetCommitRequest)
"""kio's TxnOffsetCommitRequest of each version served (0-4)."""
ALWAYS = 1 << 15  # PRODUCER_FENCED is INVALID_PRODUCER_EPOCH to every version
Members = v3.TxnOffsetCommitRequest | v4.TxnOffsetCommitRequest  # member and generation


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    generation, member, instance = -1, "", None
    if isinstance(request, Members):
        generation, member = int(request.generation_id), request.member_id
        instance = request.group_instance_id
    txn = (request.transactional_id, int(request.producer_id), int(request.producer_epoch))
    authz = ctx.authz
    everything = [(t.name, int(p.partition_index)) for t in request.topics
                  for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode]
    # KafkaApis: WRITE on the transactional id, READ on the group, READ on each topic.
    if not authz.allows(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                        request.transactional_id):
        errors = dict.fromkeys(everything, ErrorCode.transactional_id_authorization_failed)
    elif not authz.allows(Operation.READ, ResourceType.GROUP, request.group_id):
        errors = dict.fromkeys(everything, ErrorCode.group_authorization_failed)
    else:
        readable = authz.allowed(Operation.READ, ResourceType.TOPIC,
                                 (t.name for t in request.topics))
        errors = dict.fromkeys((tp for tp in everything if tp[0] not in readable),
                               ErrorCode.topic_authorization_failed)
        offsets = [o for o in committed_offsets(request.topics) if o.topic in readable]
        if offsets:
            errors.update(await ctx.groups.offsets.commit(
                request.group_id, generation, member, instance, offsets, txn))
    return b("TxnOffsetCommitResponse", throttle_time=NO_THROTTLE, topics=tuple(
        b("TxnOffsetCommitResponseTopic", name=t.name, partitions=tuple(
            b("TxnOffsetCommitResponsePartition", partition_index=i32(p.partition_index),
              error_code=fenced_as(errors[(t.name, int(p.partition_index))], 0, ALWAYS))
            for p in t.partitions))
        for t in request.topics))
