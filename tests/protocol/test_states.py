"""The partition states cache (agent/protocol/states.py): exact by commit notifications."""

from __future__ import annotations

import asyncio

from agent.protocol.states import Key, Known, PartitionStates, Waiter, seen
from metadata import PartitionInfo

KEY = ("t", 0)


def _known(next_offset: int) -> tuple[int, PartitionInfo]:
    return 7, PartitionInfo("t", 0, 0, next_offset)


def test_kept_until_the_next_notification() -> None:
    states = PartitionStates()
    states.hearing = lambda: True
    states.put(states.generation(), {KEY: _known(5)})
    assert states.get([KEY, ("t", 1)]) == {KEY: _known(5)}
    states.changed()
    assert states.get([KEY]) == {}


def test_a_read_begun_before_a_notification_is_not_kept() -> None:
    states = PartitionStates()
    states.hearing = lambda: True
    generation = states.generation()  # the read begins
    states.changed()  # a commit is notified while it reads
    states.put(generation, {KEY: _known(5)})  # what it read may predate that commit
    assert states.get([KEY]) == {}
    states.put(states.generation(), {KEY: _known(6)})
    assert states.get([KEY]) == {KEY: _known(6)}


def test_nothing_kept_nor_served_while_the_watcher_is_deaf() -> None:
    states = PartitionStates()
    hearing = [False]
    states.hearing = lambda: hearing[0]
    states.put(states.generation(), {KEY: _known(5)})
    hearing[0] = True
    assert states.get([KEY]) == {}
    states.put(states.generation(), {KEY: _known(5)})
    hearing[0] = False
    assert states.get([KEY]) == {}


# ------------------------------------------------------------ parked long-polls


class FakeReader:
    """The states' reader: what the metadata store holds now, and the reads it was asked
    for; `gate` holds a read until set (to notify while it reads)."""

    def __init__(self, offsets: dict[Key, Known]) -> None:
        self.offsets = offsets
        self.reads: list[tuple[frozenset[str], frozenset[int]]] = []
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def __call__(self, topics: frozenset[str], numbers: frozenset[int]
                       ) -> tuple[dict[Key, Known], int]:
        self.reads.append((topics, numbers))
        snapshot = dict(self.offsets)  # read as it began
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise OSError("metadata store unreachable")
        return {k: v for k, v in snapshot.items() if k[0] in topics and k[1] in numbers}, 1


def _states(offsets: dict[Key, Known]) -> tuple[PartitionStates, FakeReader]:
    states = PartitionStates()
    states.hearing = lambda: True
    reader = FakeReader(offsets)
    states.reader = reader
    return states, reader


def _park(states: PartitionStates, keys: list[Key], offsets: dict[Key, Known],
          expires: float = 3600.0) -> Waiter:
    loop = asyncio.get_running_loop()
    return states.park([(k, seen(offsets[k])) for k in keys], states.generation(),
                       loop.time() + expires)


async def _settle() -> None:
    for _ in range(10):  # the refresh task and its read run to the end (no sleeps)
        await asyncio.sleep(0)


def test_a_waiter_moves_when_any_offset_or_the_topic_row_changes() -> None:
    async def body() -> None:
        was = {KEY: _known(5)}
        states, _ = _states(was)
        waiter = _park(states, [KEY], was)
        assert not waiter.moved({KEY: _known(5)})
        assert waiter.moved({KEY: _known(6)})  # high watermark
        assert waiter.moved({KEY: (8, PartitionInfo("t", 0, 0, 5))})  # created again
        assert waiter.moved({KEY: (7, PartitionInfo("t", 0, 1, 5))})  # log start
        assert waiter.moved({})  # gone
        states.unpark(waiter)
    asyncio.run(body())


def test_a_notification_wakes_only_the_long_polls_whose_partitions_moved() -> None:
    async def body() -> None:
        a, b, c = ("t", 0), ("t", 1), ("u", 0)
        offsets = {a: _known(5), b: _known(5), c: (9, PartitionInfo("u", 0, 0, 3))}
        states, reader = _states(offsets)
        wa, wb, wc = (_park(states, [k], offsets) for k in (a, b, c))
        assert sorted(states.waiting()) == sorted([a, b, c])
        reader.offsets = {**offsets, b: _known(6)}  # a commit to b
        states.changed()
        states.notified()
        await _settle()
        assert reader.reads == [(frozenset({"t", "u"}), frozenset({0, 1}))]  # one for all
        assert wb.woken.done() and wb.woken.result() is True
        assert not wa.woken.done() and not wc.woken.done()
        assert sorted(states.waiting()) == sorted([a, c])
        assert states.paid() == 1 and states.paid() == 0  # its round trip, counted once
        # The read was kept: what the others rest on is unchanged, so an expired one
        # answers without looking again.
        assert states.unchanged(wa) and states.get([a]) == {a: _known(5)}
        for w in (wa, wc):
            states.unpark(w)
    asyncio.run(body())


def test_one_long_poll_parked_alone_is_woken_without_a_shared_read() -> None:
    async def body() -> None:
        offsets = {KEY: _known(5)}
        states, reader = _states(offsets)
        waiter = _park(states, [KEY], offsets)
        states.changed()
        states.notified()
        await _settle()
        assert reader.reads == [] and waiter.woken.result() is True  # it reads alone
    asyncio.run(body())


def test_a_failed_read_wakes_every_long_poll() -> None:
    async def body() -> None:
        offsets = {KEY: _known(5), ("t", 1): _known(5)}
        states, reader = _states(offsets)
        waiters = [_park(states, [k], offsets) for k in offsets]
        reader.fail = True
        states.changed()
        states.notified()
        await _settle()
        assert all(w.woken.result() is True for w in waiters)
        assert states.waiting() == []
    asyncio.run(body())


def test_a_read_overtaken_by_a_notification_wakes_what_it_saw_then_reads_again() -> None:
    async def body() -> None:
        a, b, c = ("t", 0), ("t", 1), ("t", 2)
        offsets = {a: _known(5), b: _known(5), c: _known(5)}
        states, reader = _states(offsets)
        wa, wb, wc = (_park(states, [k], offsets) for k in (a, b, c))
        reader.offsets = {**offsets, a: _known(6)}
        reader.gate = asyncio.Event()
        states.changed()
        states.notified()
        await _settle()  # the first read has begun: it saw a's commit, not b's
        reader.offsets = {**offsets, a: _known(6), b: _known(6)}
        states.changed()  # b's commit is notified while it reads
        states.notified()  # (the refresh under way will look again)
        reader.gate.set()
        await _settle()
        assert len(reader.reads) == 2
        assert wa.woken.result() is True and wb.woken.result() is True
        assert not wc.woken.done()
        # The second read kept (a and b, woken, are recent: it read them too).
        assert states.get([a, b, c]) == {a: _known(6), b: _known(6), c: _known(5)}
        states.unpark(wc)
    asyncio.run(body())


def test_an_expired_long_poll_is_unchanged_only_if_nothing_unlooked_was_notified() -> None:
    async def body() -> None:
        offsets = {KEY: _known(5), ("t", 1): _known(5)}
        states, reader = _states(offsets)
        waiter = _park(states, [KEY], offsets, expires=0)
        other = _park(states, [("t", 1)], offsets)
        assert await waiter.woken is False  # expired
        assert states.unchanged(waiter)  # no notification since it read
        reader.gate = asyncio.Event()
        states.changed()
        states.notified()
        await _settle()
        assert not states.unchanged(waiter)  # notified, not looked at yet: read again
        states.unpark(waiter)
        reader.gate.set()
        await _settle()
        states.unpark(other)
        hearing = [False]
        states.hearing = lambda: hearing[0]
        assert not states.unchanged(other)  # deaf: other agents' commits go unheard
    asyncio.run(body())


def test_a_failed_shared_read_leaves_the_fetch_to_read_alone() -> None:
    async def body() -> None:
        a, b = ("t", 0), ("t", 1)
        offsets = {a: _known(5), b: _known(5)}
        states, reader = _states(offsets)
        parked = _park(states, [a], offsets)
        states.changed()  # what was kept is forgotten: a fetch of b misses
        reader.fail = True
        assert await states.share([b]) is None  # not raised: the fetch reads alone
        assert reader.reads == [(frozenset({"t"}), frozenset({0, 1}))]  # b and the parked a
        states.unpark(parked)
    asyncio.run(body())
