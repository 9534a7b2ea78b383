"""The transaction coordinator of one `silt agent`: Kafka's TransactionCoordinator on the
event loop, for the transactional ids whose lease (metadata/txnstate.py) this agent holds.
It is the effect runner of transitions.py (the rules, pure): it loads a transactional id's
state at its first request here (taking its lease: another live agent holding it answers
NOT_COORDINATOR), steps each request under that id's lock, stores every change before it
answers (fenced by the lease), allocates producer ids, and completes transactions.

Completing a transaction (EndTxn, a fenced or timed-out producer's abort, a Prepare* state
found after a takeover): its Prepare* state is stored first (the decision), then the
injected `MarkerWriter` writes one marker per partition still waiting through the agent's
normal flush, whose metadata commit also completes the transaction (markers, Complete*
state and the group offsets, one metadata transaction: txnstate.complete_in). The state is
then read back: completed, the waiting EndTxn is answered; not (a flush that failed, a
chunk rejected), the markers are written again after a pause, as long as the lease is held.
A transaction with no partition (only offsets) completes in its own metadata transaction.

Time: every timeout is the injected clock's; `sweep` (the housekeeping timer) aborts the
transactions past their timeout and takes over, from dead agents, those with work left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from agent.config import AgentConfig
from agent.groups.errors import CoordinatorClosingError, CoordinatorNotRegisteredError
from clock import Clock
from metadata import MetadataStore, TransactionRecord, TxnLease
from metadata.errors import TransactionCoordinatedElsewhereError, TransactionLeaseLostError
from metadata.models import TXN_PREPARE_COMMIT

from .transitions import (
    PREPARED,
    Event,
    InitProducer,
    NeedProducerId,
    Reply,
    Store,
    Tick,
    WriteMarkers,
    step,
    verify,
)

__all__ = ["MarkerWriter", "TransactionCoordinator"]

log = logging.getLogger(__name__)
Run = Callable[..., Awaitable[Any]]
Codes = Callable[[BaseException], ErrorCode]
# Writes the markers of a Prepare* transaction (its waiting partitions) through the agent's
# flush, whose commit completes it; returns once that flush has committed or failed.
MarkerWriter = Callable[[TxnLease, TransactionRecord], Awaitable[None]]
RETRY_S = 0.2  # between attempts to complete a transaction (a failed flush)
VERIFY_TTL_S = 1.0  # how long a stored state read for verification is trusted
VERIFY_CACHED = 10_000  # transactional ids whose state verification keeps
E = ErrorCode


@dataclass(eq=False)
class Slot:
    """A transactional id loaded here: its lease, its state (replaced at every step), the
    lock its steps take, and the completion in progress (its waiters' future)."""

    lease: TxnLease
    state: TransactionRecord | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    completion: asyncio.Future[None] | None = None


class TransactionCoordinator:
    """The transactional ids this agent coordinates. `me()` is this agent's registry id;
    `run` runs blocking calls off the loop; `markers` writes markers (MarkerWriter);
    `codes` answers what keeps a request from being served through the one error table."""

    def __init__(self, metadata: MetadataStore, config: AgentConfig, run: Run,
                 me: Callable[[], str | None], markers: MarkerWriter,
                 clock: Clock | None = None, *, codes: Codes) -> None:
        self.metadata = metadata
        self.config = config
        self.run = run
        self.me = me
        self.markers = markers
        self.codes = codes
        self.clock: Clock = clock if clock is not None else metadata.clock
        self._slots: dict[str, Slot] = {}
        # Stored states read to verify produces of ids coordinated elsewhere (oldest first).
        self._verified: dict[str, tuple[float, TransactionRecord | None]] = {}
        self._loading: asyncio.Lock | None = None  # created on the loop, at first use
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # ------------------------------------------------------------------ loading

    def loaded(self, transactional_id: str) -> TransactionRecord | None:
        slot = self._slots.get(transactional_id)
        return None if slot is None else slot.state

    async def slot(self, transactional_id: str) -> Slot:
        """The id's slot, loaded here (taking its lease) if it is not yet; raises
        TransactionCoordinatedElsewhereError, CoordinatorClosingError or
        CoordinatorNotRegisteredError when it cannot be served here."""
        if (s := self._slots.get(transactional_id)) is not None:
            return s
        if self._closed:
            raise CoordinatorClosingError("this agent is shutting down")
        me = self.me()
        if me is None:
            raise CoordinatorNotRegisteredError("this agent has not registered yet")
        if self._loading is None:
            self._loading = asyncio.Lock()
        async with self._loading:
            if (s := self._slots.get(transactional_id)) is not None:
                return s
            lease = await self.run(self.metadata.acquire_transaction, transactional_id, me)
            state = await self.run(self.metadata.load_transaction, transactional_id)
            s = self._slots[transactional_id] = Slot(lease, state)
        if state is not None and state.state in PREPARED:
            self._complete_soon(s)  # Kafka's onElection: finish what the last holder began
        return s

    def _drop(self, transactional_id: str, slot: Slot) -> None:
        if self._slots.get(transactional_id) is slot:
            del self._slots[transactional_id]
        if slot.completion is not None and not slot.completion.done():
            slot.completion.set_exception(TransactionLeaseLostError(
                f"transactional id {transactional_id!r}: lease lost"))
            slot.completion.exception()  # retrieved: waiters re-raise it

    # ------------------------------------------------------------------ requests

    async def request(self, transactional_id: str, event: Event) -> Reply:
        """Step `event` on the id's state and carry out the effects; the request's answer."""
        try:
            slot = await self.slot(transactional_id)
        except (TransactionCoordinatedElsewhereError, CoordinatorClosingError,
                CoordinatorNotRegisteredError) as exc:
            return Reply(self.codes(exc))
        except Exception as exc:
            log.warning("loading transactional id %r failed: %s", transactional_id, exc)
            return Reply(E.coordinator_not_available)
        wait: asyncio.Future[None] | None = None
        reply = Reply(E.none)
        async with slot.lock:
            now = self.clock.now_ms()
            while True:
                state, effects = step(slot.state, event, now,
                                      transactional_id=transactional_id,
                                      max_timeout_ms=self.config.transaction_max_timeout_ms)
                if not any(isinstance(e, NeedProducerId) for e in effects):
                    break
                try:
                    fresh = await self.run(self.metadata.allocate_producer_id)
                except Exception as exc:
                    log.warning("allocating a producer id failed: %s", exc)
                    return Reply(E.coordinator_not_available)
                if not isinstance(event, InitProducer):
                    raise AssertionError(f"a producer id asked for by {event}")
                event = replace(event, fresh_id=fresh)
            for effect in effects:
                if isinstance(effect, Store):
                    try:
                        await self.run(self.metadata.store_transaction, slot.lease,
                                       effect.record)
                    except TransactionLeaseLostError as exc:
                        self._drop(transactional_id, slot)
                        return Reply(self.codes(exc))
                    except Exception as exc:
                        log.warning("storing transaction %r failed: %s", transactional_id,
                                    exc)
                        return Reply(E.coordinator_not_available)
                elif isinstance(effect, WriteMarkers):
                    slot.state = state
                    completion = self._complete_soon(slot)
                    if effect.answer:
                        wait = completion
                elif isinstance(effect, Reply):
                    reply = effect
            slot.state = state
        if wait is None:
            return reply
        try:
            await asyncio.shield(wait)
        except Exception as exc:
            return Reply(self.codes(exc))
        done = slot.state
        assert done is not None
        return Reply(E.none, done.producer_id, done.producer_epoch)

    def _complete_soon(self, slot: Slot) -> asyncio.Future[None]:
        """The completion of the slot's Prepare* transaction, started if it is not running."""
        if slot.completion is not None and not slot.completion.done():
            return slot.completion
        slot.completion = asyncio.get_running_loop().create_future()
        task = asyncio.get_running_loop().create_task(self._complete(slot, slot.completion))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return slot.completion

    async def _complete(self, slot: Slot, done: asyncio.Future[None]) -> None:
        """Write the markers (or complete a partition-less transaction) until the stored
        state says complete, as long as the lease is held."""
        txn_id = slot.lease.transactional_id
        attempt = 0
        while not done.done():
            record = slot.state
            if record is None or record.state not in PREPARED:
                done.set_result(None)
                return
            commit = record.state == TXN_PREPARE_COMMIT
            try:
                if record.partitions:
                    await self.markers(slot.lease, record)
                else:
                    await self.run(self.metadata.complete_transaction, slot.lease,
                                   record.producer_id, record.producer_epoch, commit)
                stored = await self.run(self.metadata.load_transaction, txn_id)
            except TransactionLeaseLostError:
                self._drop(txn_id, slot)
                return
            except Exception as exc:
                log.warning("completing transaction %r failed (attempt %d): %s", txn_id,
                            attempt + 1, exc)
                stored = None
            if stored is not None and (stored.producer_id, stored.producer_epoch) == (
                    record.producer_id, record.producer_epoch):
                if stored.state not in PREPARED:
                    self.completed(slot, stored, done)
                    return
                slot.state = stored
            if self._closed:
                done.set_exception(CoordinatorClosingError("this agent is shutting down"))
                done.exception()
                return
            if not await self._still_held(slot):
                self._drop(txn_id, slot)
                return
            attempt += 1
            await asyncio.sleep(RETRY_S * min(attempt, 10))

    def completed(self, slot: Slot, stored: TransactionRecord,
                  done: asyncio.Future[None]) -> None:
        """The transaction is complete in the store (its markers' commit, read back): the
        waiting EndTxn is answered (the `txn.committed` kill point is just before)."""
        slot.state = stored
        if not done.done():
            done.set_result(None)

    async def _still_held(self, slot: Slot) -> bool:
        me = self.me()
        try:
            held = await self.run(self.metadata.held_transactions, me) if me else {}
        except Exception:
            return True  # unknown: keep trying; a write will find out
        return held.get(slot.lease.transactional_id) == slot.lease.epoch

    # ------------------------------------------------------------------ verification

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Sequence[tuple[str, int]]) -> Mapping[tuple[str, int],
                                                                       ErrorCode]:
        """KIP-890 part 1 for a Produce of transactional batches (transitions.verify): the
        state of an id coordinated here, else its stored state, cached for VERIFY_TTL_S
        (read again at once when the cached one refuses: a partition just added, an epoch
        just bumped). A zombie's batch accepted from a stale cache entry is harmless: its
        transaction's ABORT marker carries the bumped epoch, which fences it at commit."""
        slot = self._slots.get(transactional_id)
        if slot is not None:
            return verify(slot.state, producer_id, producer_epoch, partitions)
        now = self.clock.monotonic()
        cached = self._verified.get(transactional_id)
        if cached is not None and now - cached[0] < VERIFY_TTL_S:
            answer = verify(cached[1], producer_id, producer_epoch, partitions)
            if all(e is E.none for e in answer.values()):
                return answer
        try:
            state = await self.run(self.metadata.load_transaction, transactional_id)
        except Exception as exc:
            log.warning("verifying a produce of %r failed: %s", transactional_id, exc)
            return dict.fromkeys(partitions, E.coordinator_not_available)
        if len(self._verified) >= VERIFY_CACHED:
            self._verified.pop(next(iter(self._verified)))
        self._verified.pop(transactional_id, None)
        self._verified[transactional_id] = (now, state)
        return verify(state, producer_id, producer_epoch, partitions)

    # ------------------------------------------------------------------ housekeeping

    async def sweep(self) -> int:
        """Drop the ids whose lease moved; abort the transactions past their timeout and
        finish the Prepare* ones, of this agent and of dead ones (Kafka's
        abortTimedOutTransactions and onElection); how many were stepped."""
        me = self.me()
        if me is None or self._closed:
            return 0
        held = await self.run(self.metadata.held_transactions, me)
        for txn_id, slot in list(self._slots.items()):
            if held.get(txn_id) != slot.lease.epoch:
                self._drop(txn_id, slot)
        ids = await self.run(self.metadata.unfinished_transactions, me)
        for txn_id in ids:
            await self.request(txn_id, Tick())
        return len(ids)

    def close(self) -> None:
        """Stop: completions in progress end (their waiters get NOT_COORDINATOR)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for txn_id, slot in list(self._slots.items()):
            self._drop(txn_id, slot)

    async def wait_idle(self) -> None:
        """Wait for the completions in progress (tests)."""
        while self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
