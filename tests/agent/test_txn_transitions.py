"""The transaction coordinator's rules as pure transitions (agent/transactions/transitions.py):
Kafka's TransactionCoordinator answers, in its order, without I/O or a clock."""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode

from agent.transactions.transitions import (
    AddPartitions,
    End,
    InitProducer,
    NeedProducerId,
    Reply,
    State,
    Store,
    Tick,
    WriteMarkers,
    completed,
    step,
    verify,
)
from metadata import TransactionRecord
from metadata.models import (
    MAX_EPOCH,
    TXN_COMPLETE_ABORT,
    TXN_COMPLETE_COMMIT,
    TXN_EMPTY,
    TXN_ONGOING,
    TXN_PREPARE_ABORT,
    TXN_PREPARE_COMMIT,
)

E = ErrorCode
MAX = 900_000


def _step(state: State, event: object, now: int = 1000) -> tuple[State, list[object]]:
    new, effects = step(state, event, now, transactional_id="tx",  # type: ignore[arg-type]
                        max_timeout_ms=MAX)
    return new, list(effects)


def _init(state: State, **kw: int) -> tuple[TransactionRecord, list[object]]:
    """InitProducerId, allocating producer id 7 when asked."""
    new, effects = _step(state, InitProducer(60_000, **kw))
    if effects == [NeedProducerId()]:
        new, effects = _step(state, InitProducer(60_000, fresh_id=7, **kw))
    assert new is not None
    return new, effects


def _ongoing() -> TransactionRecord:
    first, _ = _init(None)
    new, _ = _step(first, AddPartitions(7, 0, (("t", 0), ("t", 1))), now=2000)
    assert new is not None
    return new


def test_a_new_transactional_id_gets_a_producer_id_and_epoch_0() -> None:
    state, effects = _init(None)
    assert (state.producer_id, state.producer_epoch, state.state) == (7, 0, TXN_EMPTY)
    assert effects == [Store(state), Reply(E.none, 7, 0)]


def test_timeout_bounded_by_the_max() -> None:
    for bad in (0, -1, MAX + 1):
        assert _step(None, InitProducer(bad))[1] == [Reply(E.invalid_transaction_timeout)]


def test_init_again_bumps_the_epoch_and_fences() -> None:
    state, _ = _init(None)
    again, effects = _init(state)
    assert again.producer_epoch == 1 and effects[-1] == Reply(E.none, 7, 1)
    # The old producer (epoch 0) is fenced.
    assert _step(again, AddPartitions(7, 0, (("t", 0),)))[1] == [Reply(E.producer_fenced)]


def test_init_on_an_ongoing_transaction_fences_and_aborts_it() -> None:
    ongoing = _ongoing()
    fenced, effects = _init(ongoing)
    assert fenced.state == TXN_PREPARE_ABORT and fenced.producer_epoch == 1
    assert effects == [Store(fenced), WriteMarkers(fenced), Reply(E.concurrent_transactions)]
    # While the abort completes: CONCURRENT_TRANSACTIONS; once complete, epoch 2.
    assert _init(fenced)[1] == [Reply(E.concurrent_transactions)]
    done = completed(fenced, 3000)
    assert done.state == TXN_COMPLETE_ABORT and done.partitions == ()
    assert _init(done)[1][-1] == Reply(E.none, 7, 2)


def test_kip360_retry_and_fencing() -> None:
    state, _ = _init(None)
    bumped, _ = _init(state, producer_id=7, producer_epoch=0)
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (1, 0)
    retry, effects = _init(bumped, producer_id=7, producer_epoch=0)  # the reply was lost
    assert effects[-1] == Reply(E.none, 7, 1)
    assert _init(retry, producer_id=99, producer_epoch=0)[1] == [Reply(E.producer_fenced)]
    assert _init(retry, producer_id=7, producer_epoch=5)[1] == [Reply(E.producer_fenced)]


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    state, _ = _init(None)
    worn = dataclasses.replace(state, producer_epoch=MAX_EPOCH - 1)
    assert _step(worn, InitProducer(60_000, fresh_id=-1))[1] == [NeedProducerId()]
    new, effects = _step(worn, InitProducer(60_000, fresh_id=8))
    assert new is not None and (new.producer_id, new.producer_epoch) == (8, 0)
    assert effects[-1] == Reply(E.none, 8, 0)


def test_add_partitions_rules_in_kafkas_order() -> None:
    assert _step(None, AddPartitions(7, 0, (("t", 0),)))[1] == [
        Reply(E.invalid_producer_id_mapping)]
    ongoing = _ongoing()
    assert ongoing.state == TXN_ONGOING and ongoing.start_ms == 2000
    assert _step(ongoing, AddPartitions(8, 0, (("t", 0),)))[1] == [
        Reply(E.invalid_producer_id_mapping)]
    assert _step(ongoing, AddPartitions(7, 1, (("t", 0),)))[1] == [Reply(E.producer_fenced)]
    same, effects = _step(ongoing, AddPartitions(7, 0, (("t", 1),)))
    assert same == ongoing and effects == [Reply(E.none)]  # already in: nothing stored
    more, effects = _step(ongoing, AddPartitions(7, 0, groups=("g",)), now=5000)
    assert more is not None and more.groups == ("g",) and more.start_ms == 2000
    assert effects == [Store(more), Reply(E.none)]
    prepared = dataclasses.replace(ongoing, state=TXN_PREPARE_COMMIT)
    assert _step(prepared, AddPartitions(7, 0, (("t", 2),)))[1] == [
        Reply(E.concurrent_transactions)]


@pytest.mark.parametrize(("state", "commit", "answer"), [
    (TXN_COMPLETE_COMMIT, True, E.none),
    (TXN_COMPLETE_COMMIT, False, E.invalid_txn_state),
    (TXN_COMPLETE_ABORT, False, E.none),
    (TXN_COMPLETE_ABORT, True, E.invalid_txn_state),
    (TXN_PREPARE_COMMIT, True, E.concurrent_transactions),
    (TXN_PREPARE_COMMIT, False, E.invalid_txn_state),
    (TXN_PREPARE_ABORT, False, E.concurrent_transactions),
    (TXN_EMPTY, True, E.invalid_txn_state),
])
def test_end_txn_in_each_state(state: str, commit: bool, answer: ErrorCode) -> None:
    record = dataclasses.replace(_ongoing(), state=state)
    assert _step(record, End(7, 0, commit))[1][-1].error is answer  # type: ignore[attr-defined]


def test_end_txn_prepares_and_waits_for_the_markers() -> None:
    ongoing = _ongoing()
    assert _step(ongoing, End(7, 1, True))[1] == [Reply(E.producer_fenced)]
    prepared, effects = _step(ongoing, End(7, 0, True), now=4000)
    assert prepared is not None and prepared.state == TXN_PREPARE_COMMIT
    assert effects == [Store(prepared), WriteMarkers(prepared, answer=True)]


def test_a_timed_out_transaction_is_aborted_with_an_epoch_bump() -> None:
    ongoing = _ongoing()
    assert _step(ongoing, Tick(), now=2000 + 59_999) == (ongoing, [])
    aborted, effects = _step(ongoing, Tick(), now=2000 + 60_000)
    assert aborted is not None and aborted.state == TXN_PREPARE_ABORT
    assert aborted.producer_epoch == 1 and effects == [Store(aborted), WriteMarkers(aborted)]
    # A prepared one found after a takeover gets its markers written.
    assert _step(aborted, Tick())[1] == [WriteMarkers(aborted)]


def test_verify_kip890() -> None:
    ongoing = _ongoing()
    assert verify(ongoing, 7, 0, [("t", 0), ("t", 5)]) == {
        ("t", 0): E.none, ("t", 5): E.transaction_abortable}
    assert verify(ongoing, 7, 1, [("t", 0)]) == {("t", 0): E.producer_fenced}
    assert verify(None, 7, 0, [("t", 0)]) == {("t", 0): E.invalid_producer_id_mapping}
    prepared = dataclasses.replace(ongoing, state=TXN_PREPARE_ABORT)
    assert verify(prepared, 7, 0, [("t", 0)]) == {("t", 0): E.concurrent_transactions}
    done = completed(dataclasses.replace(ongoing, state=TXN_PREPARE_COMMIT), 1)
    assert verify(done, 7, 0, [("t", 0)]) == {("t", 0): E.transaction_abortable}
