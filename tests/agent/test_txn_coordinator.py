"""The transaction coordinator's runner (agent/transactions/coordinator.py), two coordinators
(two agents' worth) on one metadata store in one process, on both backends, with a
ManualClock and a marker writer that completes the transaction as the agent's flush commit
does (txnstate.complete_in in a write transaction): no sockets, no sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from agent.config import AgentConfig
from agent.protocol.errors import error_code
from agent.transactions.coordinator import TransactionCoordinator
from agent.transactions.transitions import AddPartitions, End, InitProducer, Reply
from clock import ManualClock
from metadata import MetadataStore, OffsetCommit, TransactionRecord, TxnLease, txnstate
from metadata.models import TXN_COMPLETE_ABORT, TXN_COMPLETE_COMMIT, TXN_PREPARE_ABORT

T = TypeVar("T")
E = ErrorCode


async def _run(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


class Markers:
    """Completes transactions as the flush commit's hook does; `fail` makes the next
    writes fail (a flush that failed: nothing committed)."""

    def __init__(self, md: MetadataStore) -> None:
        self.md = md
        self.written: list[tuple[str, bool, tuple[tuple[str, int], ...]]] = []
        self.fail = 0

    async def __call__(self, lease: TxnLease, record: TransactionRecord) -> None:
        if self.fail:
            self.fail -= 1
            raise OSError("flush failed")
        commit = record.state == "PrepareCommit"
        self.written.append((record.transactional_id, commit, record.partitions))
        with self.md.write() as conn:
            txnstate.complete_in(self.md, conn, lease, record.producer_id,
                                 record.producer_epoch, commit, record.partitions)


def _setup(metadata_url: str) -> tuple[MetadataStore, ManualClock]:
    clock = ManualClock()
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    md.create_topic("t", 2)
    md.register_agent("a", "127.0.0.1", 1)
    md.register_agent("b", "127.0.0.1", 2)
    return md, clock


def test_commit_with_offsets(metadata_url: str) -> None:
    md, _ = _setup(metadata_url)
    markers = Markers(md)
    a = TransactionCoordinator(md, AgentConfig(), _run, lambda: "a", markers,
                               codes=error_code)

    async def scenario() -> None:
        init = await a.request("tx", InitProducer(60_000))
        assert init.error is E.none and init.producer_epoch == 0
        pid = init.producer_id
        parts = (("t", 0), ("t", 1))
        assert (await a.request("tx", AddPartitions(pid, 0, parts))).error is E.none
        assert (await a.request("tx", AddPartitions(pid, 0, groups=("g",)))).error is E.none
        md.add_transaction_offsets("tx", pid, 0, "g", [OffsetCommit("t", 0, 5)])
        end = await a.request("tx", End(pid, 0, True))
        assert end == Reply(E.none, pid, 0)
        assert markers.written == [("tx", True, parts)]
        stored = md.load_transaction("tx")
        assert stored is not None and stored.state == TXN_COMPLETE_COMMIT
        assert [o.offset for o in md.fetch_offsets("g")] == [5]
        # The client's retry of EndTxn gets the same answer.
        assert (await a.request("tx", End(pid, 0, True))).error is E.none
        a.close()

    try:
        asyncio.run(scenario())
    finally:
        md.close()


def test_a_failed_flush_is_retried_and_a_zombie_is_fenced(metadata_url: str) -> None:
    md, _ = _setup(metadata_url)
    markers = Markers(md)
    markers.fail = 1
    a = TransactionCoordinator(md, AgentConfig(), _run, lambda: "a", markers,
                               codes=error_code)

    async def scenario() -> None:
        old = await a.request("tx", InitProducer(60_000))
        await a.request("tx", AddPartitions(old.producer_id, 0, (("t", 0),)))
        # A second producer with the same transactional id: the first one's transaction
        # is aborted with a bumped epoch; the client retries until it completes.
        new = await a.request("tx", InitProducer(60_000))
        assert new.error is E.concurrent_transactions
        await a.wait_idle()  # the first write failed; the retry completed it
        assert markers.written == [("tx", False, (("t", 0),))]
        new = await a.request("tx", InitProducer(60_000))
        assert new == Reply(E.none, old.producer_id, 2)
        late = await a.request("tx", AddPartitions(old.producer_id, 0, (("t", 1),)))
        assert late.error is E.producer_fenced
        assert (await a.request("tx", End(old.producer_id, 0, True))).error is \
            E.producer_fenced
        a.close()

    try:
        asyncio.run(scenario())
    finally:
        md.close()


def test_takeover_finishes_and_times_out(metadata_url: str) -> None:
    md, clock = _setup(metadata_url)
    markers = Markers(md)
    a = TransactionCoordinator(md, AgentConfig(), _run, lambda: "a", markers,
                               codes=error_code)
    b = TransactionCoordinator(md, AgentConfig(), _run, lambda: "b", markers,
                               codes=error_code)

    async def scenario() -> None:
        init = await a.request("tx", InitProducer(10_000))
        pid = init.producer_id
        await a.request("tx", AddPartitions(pid, 0, (("t", 0),)))
        # b may not serve it while a lives.
        assert (await b.request("tx", End(pid, 0, True))).error is E.not_coordinator
        assert await b.sweep() == 0
        # a dies with the transaction open; past its session and the timeout, b's
        # housekeeping takes the id over and aborts it with an epoch bump.
        clock.advance(md.config.broker_session_timeout_ms + 10_000)
        md.heartbeat_agent("b")
        assert await b.sweep() == 1
        await b.wait_idle()
        stored = md.load_transaction("tx")
        assert stored is not None and stored.state == TXN_COMPLETE_ABORT
        assert stored.producer_epoch == 1
        assert markers.written == [("tx", False, (("t", 0),))]
        # The client's late EndTxn: fenced.
        assert (await b.request("tx", End(pid, 0, True))).error is E.producer_fenced
        # a comes back: its stale state is dropped at its sweep, its writes fenced.
        md.heartbeat_agent("a")
        await a.sweep()
        assert a.loaded("tx") is None
        a.close()
        b.close()

    try:
        asyncio.run(scenario())
    finally:
        md.close()


def test_a_prepared_transaction_is_completed_by_the_next_holder(metadata_url: str) -> None:
    md, clock = _setup(metadata_url)
    markers = Markers(md)
    markers.fail = 10**6  # a's flushes never commit (a dies before)
    a = TransactionCoordinator(md, AgentConfig(), _run, lambda: "a", markers,
                               codes=error_code)

    async def scenario() -> None:
        init = await a.request("tx", InitProducer(60_000))
        pid = init.producer_id
        await a.request("tx", AddPartitions(pid, 0, (("t", 1),)))
        end = asyncio.ensure_future(a.request("tx", End(pid, 0, False)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        stored = md.load_transaction("tx")
        assert stored is not None and stored.state == TXN_PREPARE_ABORT
        a.close()  # a "dies": its waiting EndTxn gets NOT_COORDINATOR
        assert (await end).error is E.not_coordinator
        clock.advance(md.config.broker_session_timeout_ms + 1)
        md.heartbeat_agent("b")
        markers.fail = 0
        b = TransactionCoordinator(md, AgentConfig(), _run, lambda: "b", markers,
                                   codes=error_code)
        # The client's retry goes to b, which loads the prepared abort and completes it.
        retry = await b.request("tx", End(pid, 0, False))
        assert retry.error is E.concurrent_transactions
        await b.wait_idle()
        assert (await b.request("tx", End(pid, 0, False))).error is E.none
        b.close()

    try:
        asyncio.run(scenario())
    finally:
        md.close()
