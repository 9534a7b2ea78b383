"""Markers written through the agent's normal flush: one COMMIT/ABORT control batch
(`fileformat.control.build_marker`, the lease epoch as coordinator epoch) per partition of
a Prepare* transaction, buffered beside the data chunks (an idle agent's flush writes a
small object), with a commit hook (`metadata.files.CommitHook`) that completes the
transaction in the flush's metadata commit (`metadata.txnstate.complete_in`): the markers,
the Complete* state and the transaction's group offsets become visible together.

A partition whose topic or partition is gone (deleted since it was added) needs no marker:
the hook counts it written, as Kafka's marker channel drops markers of removed partitions.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import sqlalchemy as sa

from agent.errors import PartitionOutOfRangeError
from agent.producer import Agent, ProduceFuture
from fileformat.control import build_marker
from metadata import MetadataStore, RejectedChunk, TransactionRecord, TxnLease, txnstate
from metadata.errors import UnknownPartitionError, UnknownTopicError
from metadata.files import Outcomes
from metadata.models import TXN_PREPARE_COMMIT

Run = Callable[..., Awaitable[Any]]
GONE = (UnknownTopicError, UnknownPartitionError, PartitionOutOfRangeError)


def _complete(metadata: MetadataStore, lease: TxnLease, record: TransactionRecord,
              gone: Collection[tuple[str, int]], conn: sa.Connection,
              outcomes: Outcomes) -> None:
    """The hook: this transaction's partitions whose marker the commit inserted (or whose
    partition is gone) are done; the transaction completes once all are."""
    waiting = set(record.partitions)
    written = set(gone)
    for tp, outcome in outcomes.items():
        if tp in waiting and (isinstance(outcome, int) or (
                isinstance(outcome, RejectedChunk) and isinstance(outcome.other, GONE))):
            written.add(tp)
    if written & waiting:
        txnstate.complete_in(metadata, conn, lease, record.producer_id,
                             record.producer_epoch, record.state == TXN_PREPARE_COMMIT,
                             written)


class AgentMarkers:
    """The coordinator's `MarkerWriter` over an `Agent` (blocking appends through `run`)."""

    def __init__(self, agent: Agent, metadata: MetadataStore, run: Run) -> None:
        self.agent = agent
        self.metadata = metadata
        self.run = run

    async def __call__(self, lease: TxnLease, record: TransactionRecord) -> None:
        """Buffer the markers and return once their flush has committed or failed (the
        coordinator reads the outcome back from the store)."""
        futures = await self.run(self._append, lease, record)
        loop = asyncio.get_running_loop()
        waits = []
        for produced in futures:
            done: asyncio.Future[None] = loop.create_future()
            produced.add_done_callback(functools.partial(_resolve, loop, done))
            waits.append(done)
        await asyncio.gather(*waits)

    def _append(self, lease: TxnLease, record: TransactionRecord) -> list[ProduceFuture]:
        commit = record.state == TXN_PREPARE_COMMIT
        now = self.metadata.clock.now_ms()
        gone: set[tuple[str, int]] = set()
        live = []
        for topic, partition in record.partitions:
            try:
                self.agent.partition_topic(topic, partition)
                live.append((topic, partition))
            except GONE:
                gone.add((topic, partition))
        hook = functools.partial(_complete, self.metadata, lease, record, frozenset(gone))
        if not live:  # nothing to write: complete in a transaction of its own
            self.metadata.complete_transaction(lease, record.producer_id,
                                               record.producer_epoch, commit, gone)
            return []
        marker = build_marker(record.producer_id, record.producer_epoch, commit=commit,
                              coordinator_epoch=lease.epoch, timestamp_ms=now)
        out = []
        for topic, partition in live:
            try:
                produced = self.agent.produce_batch(topic, partition, marker, coordinator=True)
            except GONE:  # deleted meanwhile: the next attempt counts it gone
                continue
            # Its flush may have begun already (sealed at once by a full buffer): the
            # marker is then written without completing anything, and the coordinator,
            # finding the transaction still prepared, writes them again.
            self.agent.on_commit(produced, hook)
            out.append(produced)
        return out


def _resolve(loop: asyncio.AbstractEventLoop, done: asyncio.Future[None],
             _: ProduceFuture) -> None:
    def settle() -> None:
        if not done.done():
            done.set_result(None)
    loop.call_soon_threadsafe(settle)
