"""Committed offsets (Kafka's OffsetMetadataManager): OffsetCommit, TxnOffsetCommit and
OffsetDelete, stored in the metadata store in one transaction each, fenced by the group's
lease, after the group's own checks (transitions.py: the member and generation of a commit,
the subscriptions of a delete). A TxnOffsetCommit's offsets are held by the transaction
(metadata/txnstate.py `add_offsets`, which checks its producer) until it commits.
OffsetFetch reads the store directly, at any agent."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from kio.schema.errors import ErrorCode

from metadata import OffsetCommit
from metadata.errors import (
    ConcurrentTransactionsError,
    GroupLeaseLostError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
)

from .errors import UNSERVED
from .transitions import CommitCheck, offsets_deletable

if TYPE_CHECKING:
    from .coordinator import Coordinator

log = logging.getLogger(__name__)
E = ErrorCode
Partitions = dict[tuple[str, int], ErrorCode]
# What refuses a TxnOffsetCommit's producer (txnstate.add_offsets).
TXN_REFUSALS = (InvalidProducerIdMappingError, ProducerFencedError, InvalidTxnStateError,
                ConcurrentTransactionsError)


class CommittedOffsets:
    """The committed offsets of the groups `coordinator` coordinates."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator

    async def commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None, offsets: Sequence[OffsetCommit],
                     txn: tuple[str, int, int] | None = None) -> Partitions:
        """OffsetCommit: an error per (topic, partition); all stored in one transaction.
        `txn` (transactional id, producer id, epoch): TxnOffsetCommit, the offsets held by
        that transaction until it commits (its producer's errors for every partition)."""
        c = self.coordinator
        keys = [(o.topic, o.partition) for o in offsets]

        def every(code: ErrorCode) -> Partitions:
            return dict.fromkeys(keys, code)

        try:  # an empty group id is valid here, as in Kafka (old clients commit under it)
            s = await c.existing_slot(group_id)
            if s is None:
                if generation >= 0:  # no such group: a commit of an older generation
                    return every(E.illegal_generation)
                s = await c.slot(group_id)  # a "simple" consumer's group is created
        except UNSERVED as exc:
            return every(c.codes(exc))
        error = cast(ErrorCode, await c.ask(s, lambda token: CommitCheck(
            token, generation, member_id, instance_id)))
        lease = s.group.lease
        if error is not E.none:
            return every(error)
        limit = c.config.offset_metadata_max_bytes
        out = {(o.topic, o.partition): E.offset_metadata_too_large for o in offsets
               if o.metadata is not None and len(o.metadata.encode()) > limit}
        good = [o for o in offsets if (o.topic, o.partition) not in out]
        try:
            if txn is not None:
                unknown: set[tuple[str, int]] = await c.run(
                    c.metadata.add_transaction_offsets, *txn, group_id, good)
            else:
                unknown = await c.run(c.metadata.commit_offsets, group_id, good,
                                      lease) if good else set()
        except GroupLeaseLostError as exc:
            c.drop(s, str(exc))
            return every(c.codes(exc))
        except TXN_REFUSALS as exc:
            return every(c.codes(exc))
        except Exception:
            log.exception("group %r: OffsetCommit failed", group_id)
            return every(E.coordinator_not_available)
        for key in keys:
            out.setdefault(key, E.unknown_topic_or_partition if key in unknown else E.none)
        return out

    async def delete(self, group_id: str, partitions: Sequence[tuple[str, int]]
                     ) -> tuple[ErrorCode, Partitions]:
        """OffsetDelete (Kafka's handleDeleteOffsets): any partition of an empty group; of
        a consumer group with members, those of topics it does not subscribe to (a
        subscription that cannot be read counts as subscribed to everything); another
        protocol's group with members: NON_EMPTY_GROUP."""
        c = self.coordinator
        try:
            s = await c.existing_slot(group_id)
        except UNSERVED as exc:
            return c.codes(exc), {}
        if s is None:
            return E.group_id_not_found, {}
        async with s.lock:
            error, out = offsets_deletable(s.group, partitions)
            lease = s.group.lease
        if error is not E.none:
            return error, {}
        rest = [tp for tp in partitions if tp not in out]
        try:
            await c.run(c.metadata.delete_offsets, group_id, rest, lease)
        except GroupLeaseLostError as exc:
            c.drop(s, str(exc))
            return c.codes(exc), {}
        for tp in rest:
            out[tp] = E.none
        return E.none, out
