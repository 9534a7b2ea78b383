"""Kafka's transaction coordinator as pure transitions: `step(state, event, now) ->
(state, effects)`, TransactionCoordinator's handlers (Kafka 3.9/4.0, transactions V1: the
client never bumps its own epoch) and TransactionMetadata's moves without the I/O.

`step` never changes the state it is given, never waits, reads no clock (`now` is the
injected clock's epoch ms) and does no I/O; what must happen outside is returned as
effects, which the coordinator's runner carries out in order:

- `NeedProducerId()`: allocate a producer id and step the same event again with it
  (`fresh_id`): a new transactional id, or one whose epoch is exhausted;
- `Store(record)`: store the state (fenced by the lease); if it fails the step never
  happened (the runner keeps the state it had) and the request gets the failure's code;
- `WriteMarkers(record, answer)`: write one marker per partition still waiting in
  `record` (Prepare*), completing the transaction in the markers' commit; `answer`: the
  request waits for that and is then answered NONE (EndTxn);
- `Reply(error, producer_id, producer_epoch)`: answer the request.

Errors are checked in Kafka's order; PRODUCER_FENCED is turned into INVALID_PRODUCER_EPOCH
for older request versions by the handlers, as KafkaApis does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from metadata import TransactionRecord
from metadata.models import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    TXN_COMPLETE_ABORT,
    TXN_COMPLETE_COMMIT,
    TXN_EMPTY,
    TXN_ONGOING,
    TXN_PREPARE_ABORT,
    TXN_PREPARE_COMMIT,
)

E = ErrorCode
NO_PRODUCER_ID = -1
PREPARED = (TXN_PREPARE_COMMIT, TXN_PREPARE_ABORT)
COMPLETED = (TXN_COMPLETE_COMMIT, TXN_COMPLETE_ABORT)

# ------------------------------------------------------------------ events


@dataclass(frozen=True, slots=True)
class InitProducer:
    """InitProducerId with a transactional id. `producer_id`/`producer_epoch`: what the
    client has (v3+, KIP-360; -1 when it has none); `fresh_id`: a producer id allocated
    at the runner's request (NeedProducerId), -1 before."""

    timeout_ms: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    fresh_id: int = NO_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class AddPartitions:
    """AddPartitionsToTxn (partitions) or AddOffsetsToTxn (a group)."""

    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class End:
    """EndTxn from the client: commit or abort."""

    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: an Ongoing transaction past its timeout is aborted with an epoch bump
    (Kafka's abortTimedOutTransactions); a Prepare* one (loaded after a takeover) gets its
    markers written."""


Event = InitProducer | AddPartitions | End | Tick

# ------------------------------------------------------------------ effects


@dataclass(frozen=True, slots=True)
class NeedProducerId:
    """Allocate a producer id and step the event again with it."""


@dataclass(frozen=True, slots=True)
class Store:
    record: TransactionRecord


@dataclass(frozen=True, slots=True)
class WriteMarkers:
    record: TransactionRecord
    answer: bool = False


@dataclass(frozen=True, slots=True)
class Reply:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


Effect = NeedProducerId | Store | WriteMarkers | Reply
State = TransactionRecord | None
Result = tuple[State, list[Effect]]

# ------------------------------------------------------------------ rules


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: the last epoch is kept for fencing."""
    return epoch >= MAX_EPOCH - 1


def valid_timeout(timeout_ms: int, max_timeout_ms: int) -> bool:
    """transaction.timeout.ms is positive and at most transaction.max.timeout.ms."""
    return 0 < timeout_ms <= max_timeout_ms


def step(state: State, event: Event, now: int, *, transactional_id: str,
         max_timeout_ms: int) -> Result:
    """One event on one transactional id's state (None: never stored)."""
    if isinstance(event, InitProducer):
        return _init(state, event, now, transactional_id, max_timeout_ms)
    if isinstance(event, AddPartitions):
        return _add(state, event, now)
    if isinstance(event, End):
        return _end(state, event, now)
    return _tick(state, now)


def _fail(state: State, error: ErrorCode) -> Result:
    return state, [Reply(error)]


def _init(state: State, ev: InitProducer, now: int, transactional_id: str,
          max_timeout_ms: int) -> Result:
    if not valid_timeout(ev.timeout_ms, max_timeout_ms):
        return _fail(state, E.invalid_transaction_timeout)
    expected = ev.producer_id != NO_PRODUCER_ID
    if state is None:
        if ev.fresh_id == NO_PRODUCER_ID:
            return state, [NeedProducerId()]
        state = TransactionRecord(transactional_id, ev.fresh_id, NO_PRODUCER_EPOCH,
                                  NO_PRODUCER_ID, NO_PRODUCER_EPOCH, TXN_EMPTY, (), (),
                                  ev.timeout_ms, -1, now)
    if expected and not (state.producer_epoch == NO_PRODUCER_EPOCH
                         or ev.producer_id == state.producer_id
                         or (ev.producer_id == state.last_producer_id
                             and epoch_exhausted(ev.producer_epoch))):
        return _fail(state, E.producer_fenced)
    if state.state in PREPARED:
        return _fail(state, E.concurrent_transactions)
    if state.state == TXN_ONGOING:
        # Fence the current producer and abort its transaction; this epoch is never handed
        # out: the client retries and gets the next one (Kafka's PrepareEpochFence).
        fenced = _fence(state, now)
        return fenced, [Store(fenced), WriteMarkers(fenced), Reply(E.concurrent_transactions)]
    if state.state not in (TXN_EMPTY, *COMPLETED):
        raise AssertionError(f"{transactional_id!r}: InitProducerId in state {state.state}")
    if epoch_exhausted(state.producer_epoch) and (
            not expected or ev.producer_epoch == state.producer_epoch):
        if ev.fresh_id in (NO_PRODUCER_ID, state.producer_id):
            return state, [NeedProducerId()]
        new = dataclasses.replace(
            state, producer_id=ev.fresh_id, producer_epoch=0,
            last_producer_id=state.producer_id if expected else NO_PRODUCER_ID,
            last_producer_epoch=state.producer_epoch if expected else NO_PRODUCER_EPOCH,
            state=TXN_EMPTY, partitions=(), groups=(), timeout_ms=ev.timeout_ms,
            start_ms=-1, updated_ms=now)
    else:
        bumped = state.producer_epoch + 1
        if not expected:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif state.producer_epoch == NO_PRODUCER_EPOCH or ev.producer_epoch == state.producer_epoch:
            epoch, last = bumped, state.producer_epoch
        elif ev.producer_epoch == state.last_producer_epoch:
            epoch, last = state.producer_epoch, state.last_producer_epoch  # a retry
        else:
            return _fail(state, E.producer_fenced)
        new = dataclasses.replace(state, producer_epoch=epoch, last_producer_epoch=last,
                                  state=TXN_EMPTY, partitions=(), groups=(),
                                  timeout_ms=ev.timeout_ms, start_ms=-1, updated_ms=now)
    return new, [Store(new), Reply(E.none, new.producer_id, new.producer_epoch)]


def _fence(state: TransactionRecord, now: int) -> TransactionRecord:
    """Kafka's prepareFenceProducerEpoch + PrepareAbort: the epoch bumped (unless it is the
    last one), the transaction aborting."""
    epoch = state.producer_epoch if state.producer_epoch >= MAX_EPOCH else \
        state.producer_epoch + 1
    return dataclasses.replace(state, producer_epoch=epoch,
                               last_producer_epoch=NO_PRODUCER_EPOCH,
                               state=TXN_PREPARE_ABORT, updated_ms=now)


def _check_producer(state: State, producer_id: int, producer_epoch: int) -> ErrorCode | None:
    """The producer checks every request of an ongoing transaction makes first."""
    if state is None or state.producer_id != producer_id:
        return E.invalid_producer_id_mapping
    if state.producer_epoch != producer_epoch:
        return E.producer_fenced
    return None


def _add(state: State, ev: AddPartitions, now: int) -> Result:
    error = _check_producer(state, ev.producer_id, ev.producer_epoch)
    if error is not None or state is None:
        return _fail(state, error or E.invalid_producer_id_mapping)
    if state.state in PREPARED:
        return _fail(state, E.concurrent_transactions)
    if state.state == TXN_ONGOING and set(ev.partitions) <= set(state.partitions) \
            and set(ev.groups) <= set(state.groups):
        return state, [Reply(E.none)]
    if state.state not in (TXN_EMPTY, TXN_ONGOING, *COMPLETED):
        return _fail(state, E.invalid_txn_state)
    start = now if state.state != TXN_ONGOING else state.start_ms
    new = dataclasses.replace(
        state, state=TXN_ONGOING,
        partitions=tuple(sorted(set(state.partitions) | set(ev.partitions))),
        groups=tuple(sorted(set(state.groups) | set(ev.groups))),
        start_ms=start, updated_ms=now)
    return new, [Store(new), Reply(E.none)]


def _end(state: State, ev: End, now: int) -> Result:
    error = _check_producer(state, ev.producer_id, ev.producer_epoch)
    if error is not None or state is None:
        return _fail(state, error or E.invalid_producer_id_mapping)
    done, prepared = ((TXN_COMPLETE_COMMIT, TXN_PREPARE_COMMIT) if ev.commit
                      else (TXN_COMPLETE_ABORT, TXN_PREPARE_ABORT))
    if state.state == TXN_ONGOING:
        new = dataclasses.replace(state, state=prepared, updated_ms=now)
        return new, [Store(new), WriteMarkers(new, answer=True)]
    if state.state == done:
        return state, [Reply(E.none, state.producer_id, state.producer_epoch)]
    if state.state == prepared:
        return _fail(state, E.concurrent_transactions)
    return _fail(state, E.invalid_txn_state)


def _tick(state: State, now: int) -> Result:
    if state is None:
        return state, []
    if state.state in PREPARED:
        return state, [WriteMarkers(state)]
    if state.state == TXN_ONGOING and due(state, now):
        fenced = _fence(state, now)
        return fenced, [Store(fenced), WriteMarkers(fenced)]
    return state, []


def due(state: TransactionRecord, now: int) -> bool:
    """Whether an Ongoing transaction has run past its timeout."""
    return state.state == TXN_ONGOING and state.start_ms + state.timeout_ms <= now


def completed(state: TransactionRecord, now: int) -> TransactionRecord:
    """A Prepare* transaction once every marker is written (as transactions.complete_in
    stores it): Complete*, no partitions or groups."""
    return dataclasses.replace(
        state, state=TXN_COMPLETE_COMMIT if state.state == TXN_PREPARE_COMMIT
        else TXN_COMPLETE_ABORT, partitions=(), groups=(), updated_ms=now)


def verify(state: State, producer_id: int, producer_epoch: int,
           partitions: Sequence[tuple[str, int]]) -> Mapping[tuple[str, int], ErrorCode]:
    """KIP-890 part 1: may this producer's transactional batches go to these partitions?
    (Kafka's handleVerifyPartitionsInTransaction; the error each partition gets, NONE if
    added to the ongoing transaction.) TRANSACTION_ABORTABLE for one never added."""
    error = _check_producer(state, producer_id, producer_epoch)
    if error is None and state is not None and state.state in PREPARED:
        error = E.concurrent_transactions
    if error is not None or state is None:
        return dict.fromkeys(partitions, error or E.invalid_producer_id_mapping)
    added = set(state.partitions) if state.state == TXN_ONGOING else set()
    return {tp: E.none if tp in added else E.transaction_abortable for tp in partitions}
