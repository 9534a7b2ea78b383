"""DescribeTransactions (key 65): each transactional id's state as its coordinator has it
(kafka-transactions.sh describe): producer id and epoch, state, timeout, start time, its
partitions. Answered where FindCoordinator sends the client: another live agent holding
the id's lease NOT_COORDINATOR; an empty id INVALID_REQUEST; an id never initialised (or
Dead) TRANSACTIONAL_ID_NOT_FOUND, as Kafka's TransactionCoordinator answers (an error's
other fields 0, the schema's defaults; a transaction not started has start time -1).
DESCRIBE on the transactional id is needed (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
only the partitions of topics it may DESCRIBE are listed.
"""

from __future__ import annotations

import datetime

from kio.schema.describe_transactions import v0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64
from kio.static.protocol import Entity, RequestHeader

from acl import Operation, ResourceType
from metadata import TransactionRecord
from metadata.models import TXN_DEAD

from ..codec import NO_THROTTLE, Builder
from ..context import ServerContext

Request = v0.DescribeTransactionsRequest
"""kio's DescribeTransactionsRequest of each version served (0)."""

E = ErrorCode


def describe(ctx: ServerContext, txn_id: str) -> tuple[ErrorCode, TransactionRecord | None]:
    """One id's answer (blocking: metadata reads)."""
    if not txn_id:
        return E.invalid_request, None
    holder = ctx.metadata.transaction_coordinator(txn_id)
    me = ctx.registration.agent_id if ctx.registration is not None else None
    if holder is not None and holder.agent_id != me:
        return E.not_coordinator, None
    record = ctx.txns.loaded(txn_id) or ctx.metadata.load_transaction(txn_id)
    if record is None or record.state == TXN_DEAD:
        return E.transactional_id_not_found, None
    return E.none, record


def _ms(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


async def handle(ctx: ServerContext, header: RequestHeader, request: Request,
                 b: Builder) -> Entity:
    states = []
    authz = ctx.authz
    visible = authz.decider(Operation.DESCRIBE, ResourceType.TOPIC)
    for txn_id in request.transactional_ids:
        if not authz.allows(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            error, r = ErrorCode.transactional_id_authorization_failed, None
        else:
            error, r = await ctx.run(describe, ctx, txn_id)
        topics: dict[str, list[int]] = {}
        for topic, partition in (r.partitions if r else ()):
            if visible(topic):  # only the partitions it may describe (KafkaApis)
                topics.setdefault(topic, []).append(partition)
        states.append(b(
            "TransactionState", error_code=error, transactional_id=txn_id,
            transaction_state=r.state if r else "",
            transaction_timeout=datetime.timedelta(milliseconds=r.timeout_ms if r else 0),
            transaction_start_time=_ms(r.start_ms if r else 0),
            producer_id=i64(r.producer_id if r else 0),
            producer_epoch=i16(r.producer_epoch if r else 0),
            topics=tuple(b("TopicData", topic=t, partitions=tuple(i32(p) for p in ps))
                         for t, ps in topics.items())))
    return b("DescribeTransactionsResponse", throttle_time=NO_THROTTLE,
             transaction_states=tuple(states))
