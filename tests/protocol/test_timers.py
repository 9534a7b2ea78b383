"""`silt agent`'s producer-state expiry timer, driven by a ManualClock (no sleeping)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import sqlalchemy as sa

from agent.protocol.timers import producer_expiry
from clock import ManualClock, Periodic
from metadata import MetadataStore
from metadata import schema as s
from metadata.config import MetadataConfig
from tests.idempotence.helpers import commit, pbatch

WAIT_S = 30.0
EXPIRATION_MS, CHECK_MS = 60_000, 600_000


def _rows(md: MetadataStore) -> int:
    with md.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(s.producer_state))
                   .scalar_one())


def test_expiry_timer_deletes_idle_producer_states_each_interval(
        metadata_url: str, clock: ManualClock) -> None:
    md = MetadataStore.open(metadata_url, clock=clock, config=MetadataConfig(
        producer_id_expiration_ms=EXPIRATION_MS,
        producer_id_expiration_check_interval_ms=CHECK_MS), create=True)
    md.create_topic("t", 2)
    commit(md, "a", {("t", 0): [pbatch(md.allocate_producer_id(), 0, 0)]})
    timer = producer_expiry(md).start()
    try:
        clock.advance(CHECK_MS - 1)  # expired, but the first check is one interval away
        commit(md, "b", {("t", 1): [pbatch(md.allocate_producer_id(), 0, 0)]})
        assert _rows(md) == 2
        clock.advance(1)  # the check: only the idle state goes
        _wait(lambda: _rows(md) == 1)
        clock.advance(CHECK_MS)  # the next one takes the other
        _wait(lambda: _rows(md) == 0)
    finally:
        timer.stop()
        md.close()


def _wait(done: Callable[[], bool]) -> None:
    """Wait (real time, bounded) until `done()`: the timer's thread does the deletion."""
    pause = threading.Event()
    for _ in range(int(WAIT_S / 0.05)):
        if done():
            return
        pause.wait(0.05)
    raise AssertionError("the expiry timer did not run")


def test_periodic_runs_once_per_interval_and_survives_a_failing_call(
        clock: ManualClock) -> None:
    calls: list[int] = []
    ran = threading.Condition()

    def task() -> None:
        with ran:
            calls.append(clock.now_ms())
            ran.notify_all()
        if len(calls) == 1:
            raise RuntimeError("first call fails")

    timer = Periodic("t", 1_000, task, clock).start()
    try:
        start = clock.now_ms()
        for n in (1, 2, 3):
            clock.advance(1_000)
            with ran:
                assert ran.wait_for(lambda: len(calls) >= n, WAIT_S)  # noqa: B023
        assert calls == [start + 1_000, start + 2_000, start + 3_000]
    finally:
        timer.stop()
