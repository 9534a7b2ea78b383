"""Partitions' offsets (log start, high watermark, last stable offset) as this agent last
read them, so that a long-poll of caught-up partitions reads nothing from the metadata store.

Kept exact by the commit notifications the agent already receives (metadata/notify.py):
every notification — this agent's own commits, before their Produce is answered, and the
commit watcher's for every agent's — starts a new generation, which forgets every entry.
A read takes the generation BEFORE it reads and stores what it read only if it is still
current, so an entry never predates a notification that came after its read began: after
the commit that moved a partition is notified here, its old offsets are never served.

Only while the watcher hears every commit (`hearing`: its LISTEN connection, or its SQLite
data_version poll, works): while it does not, nothing is kept, and its reconnection is a
notification. What a notification cannot cover it shares with the long-polls it wakes: a
commit of another agent is seen here once its notification arrives (well under a
millisecond on PostgreSQL, up to 25 ms on SQLite).

A notification does not wake the long-polls waiting here: it starts one read of the
offsets of every partition they wait on (`refresh`, one at a time), which then wakes only
those whose partitions moved (`Waiter.moved`); a long-poll of caught-up partitions sleeps
through commits to other partitions. Fetches that miss meanwhile await that read when it
covers their partitions (`share`, agent/protocol/apis/fetch.py) rather than each reading its
own; it also covers the partitions waited on in the last RECENT_S, so a consumer between two
polls finds its offsets kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from metadata import PartitionInfo

Key = tuple[str, int]
"""(topic name, partition)."""
Known = tuple[int, PartitionInfo]
"""A partition's topic row id (the incarnation read) and its offsets."""


Reader = Callable[[frozenset[str], frozenset[int]], Awaitable[tuple[dict[Key, Known], int]]]
"""Reads the offsets of partitions `numbers` of `topics` off the loop: (what exists, the
metadata round trips it made)."""

RECENT_S = 1.0
# A shared read also covers the partitions waited on this recently: the consumers between
# two polls when it starts.


@dataclass(frozen=True, slots=True, eq=False)
class SharedRead:
    """A read begun at `generation` of the offsets of partitions `numbers` of `topics`,
    which fetches missing only some of them await rather than each reading its own
    (`task`: what it read, and its round trips)."""

    generation: int
    topics: frozenset[str]
    numbers: frozenset[int]
    task: asyncio.Future[tuple[dict[Key, Known], int]]

    def covers(self, keys: Iterable[Key]) -> bool:
        return all(t in self.topics and p in self.numbers for t, p in keys)


class Seen(NamedTuple):
    """What a fetch's answer for a partition rests on: any change to one of these, and the
    answer may differ."""

    row: int  # the topic row (a topic deleted and created again has another)
    log_start: int
    high_watermark: int
    last_stable: int


def seen(known: Known) -> Seen:
    info = known[1]
    return Seen(known[0], info.log_start_offset, info.next_offset, info.last_stable_offset)


@dataclass(slots=True, eq=False)
class Waiter:
    """A long-poll parked until one of its partitions moves: each partition with what its
    answer rested on (`Seen`), the generation it was read in, and the future that wakes it:
    True when a refresh saw a partition move (or could not tell), False when it expired."""

    wants: list[tuple[Key, Seen]]
    generation: int
    woken: asyncio.Future[bool] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    timer: asyncio.TimerHandle | None = None  # its expiry

    def moved(self, offsets: Mapping[Key, Known]) -> bool:
        """Whether a partition's answer would differ now: gone, created again, or any of
        its offsets changed."""
        for key, was in self.wants:
            known = offsets.get(key)
            if known is None or seen(known) != was:
                return True
        return False


class PartitionStates:
    """The cache (thread-safe: fetch reads run in the pool, notifications come from any
    thread), and the long-polls parked on it (on the loop only)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._known: dict[Key, Known] = {}
        # Whether the commit watcher hears every commit now (none until one is attached).
        self.hearing: Callable[[], bool] = lambda: False
        # Reads offsets off the loop (set by the server's context).
        self.reader: Reader | None = None
        # On the event loop only: the parked long-polls, when each partition was last
        # waited on, the last shared read, the generation the parked ones were last
        # looked at in, and the refresh under way.
        self._parked: set[Waiter] = set()
        self._recent: dict[Key, float] = {}
        self.shared: SharedRead | None = None
        self._looked = 0
        self._refresh: asyncio.Task[None] | None = None
        self._unpaid = 0  # round trips of refreshes not yet counted by a fetch

    def generation(self) -> int:
        """The current generation: take it BEFORE reading what `put` will store."""
        return self._generation

    def changed(self) -> None:
        """A commit was notified: forget everything (any thread; then `notified` on the
        loop)."""
        with self._lock:
            self._generation += 1
            self._known = {}

    def get(self, keys: Iterable[Key]) -> dict[Key, Known]:
        """The entries known for `keys` (none while the watcher is deaf)."""
        known = self.kept()
        return {k: known[k] for k in keys if k in known}

    def kept(self) -> Mapping[Key, Known]:
        """Every entry known now (none while the watcher is deaf): a snapshot, replaced
        whole by `changed` and `put`, never changed after (callers must not change it)."""
        return self._known if self.hearing() else {}

    def put(self, generation: int, entries: Mapping[Key, Known]) -> None:
        """Keep `entries`, read after `generation()` returned `generation`, unless a
        notification came since (or the watcher is deaf)."""
        if not entries or not self.hearing():
            return
        with self._lock:
            if generation == self._generation:
                self._known = {**self._known, **entries}

    # ------------------------------------------------------------ parked long-polls

    def waiting(self) -> list[Key]:
        """The partitions parked long-polls wait on (on the loop)."""
        return list({key for w in self._parked for key, _ in w.wants})

    def park(self, wants: list[tuple[Key, Seen]], generation: int, expires: float
             ) -> Waiter:
        """Park a long-poll whose answer rests on `wants`, read in `generation` (on the
        loop), until a refresh sees one move or the loop's clock reaches `expires`.
        `unpark` it when it answers."""
        waiter = Waiter(wants, generation)
        waiter.timer = asyncio.get_running_loop().call_at(expires, _expire, waiter.woken)
        self._parked.add(waiter)
        return waiter

    def unchanged(self, waiter: Waiter) -> bool:
        """Whether the answer `waiter` was parked with still holds (an expired one then
        answers it without looking again): the watcher hears every commit, and none was
        notified since it was read, or the last refresh looked at it after the last one."""
        generation = self._generation
        return self.hearing() and generation in (waiter.generation, self._looked)

    def unpark(self, waiter: Waiter | None) -> None:
        """`waiter` answers (or was woken): it waits no longer."""
        if waiter is not None and waiter.timer is not None:
            waiter.timer.cancel()
        if waiter is not None and waiter in self._parked:
            self._parked.discard(waiter)
            now = time.monotonic()
            for key, _ in waiter.wants:
                self._recent[key] = now

    def paid(self) -> int:
        """The round trips of refreshes since the last call, for a fetch to count."""
        unpaid, self._unpaid = self._unpaid, 0
        return unpaid

    def notified(self) -> None:
        """After `changed`, on the loop: look at the parked long-polls again (`_refreshing`,
        one task at a time)."""
        if self._parked and (self._refresh is None or self._refresh.done()):
            self._refresh = asyncio.ensure_future(self._refreshing())

    def wake_all(self) -> None:
        """Wake every parked long-poll (shutdown)."""
        for waiter in list(self._parked):
            self._wake(waiter)

    def _wake(self, waiter: Waiter) -> None:
        self.unpark(waiter)
        if not waiter.woken.done():
            waiter.woken.set_result(True)

    async def _refreshing(self) -> None:
        """Until the parked long-polls have been looked at in the current generation: read
        the offsets of every partition they (or recent ones) wait on, in one shared read
        begun in that generation, and wake those whose partitions moved. A read overtaken
        by a notification still wakes those it shows moved (it saw every commit notified
        before it began), then the next one looks at the rest; a failed one wakes all, to
        read and answer alone. One long-poll parked alone is simply woken: its own read
        costs what the shared one would, and reads its records with its offsets."""
        while self._parked and self._looked != self._generation:
            generation = self._generation
            if len(self._parked) == 1:  # alone, its own pass reads once, records and all
                self._looked = generation
                self.wake_all()
                continue
            read = self._start_read(generation, self._wanted())
            try:
                offsets, trips = await asyncio.shield(read.task)
            except Exception:
                self._looked = generation
                self.wake_all()
                continue
            self._unpaid += trips
            self._looked = generation
            for waiter in [w for w in self._parked if w.moved(offsets)]:
                self._wake(waiter)

    def _wanted(self, keys: Iterable[Key] = ()) -> set[Key]:
        """`keys`, the partitions parked long-polls wait on, and those waited on in the
        last RECENT_S (older ones forgotten)."""
        now = time.monotonic()
        self._recent = {k: t for k, t in self._recent.items() if now - t < RECENT_S}
        return {*keys, *self._recent, *(key for w in self._parked for key, _ in w.wants)}

    def _start_read(self, generation: int, wanted: set[Key]) -> SharedRead:
        """Start the shared read of `wanted` begun in `generation`: kept if no notification
        came meanwhile."""
        assert self.reader is not None, "a reader is set before long-polls park"
        topics, numbers = frozenset(t for t, _ in wanted), frozenset(p for _, p in wanted)
        reading = self.reader(topics, numbers)

        async def read() -> tuple[dict[Key, Known], int]:
            offsets, trips = await reading
            self.put(generation, offsets)
            return offsets, trips

        self.shared = SharedRead(generation, topics, numbers, asyncio.ensure_future(read()))
        return self.shared

    async def share(self, keys: list[Key]) -> int | None:
        """Await a read that keeps the offsets of `keys`: the one under way in this
        generation if it covers them, else one started here that also covers every other
        partition parked or recent long-polls want, if there are such (None if not, or if
        that read failed: the fetch then reads alone, and answers the error). The round
        trips this fetch paid for."""
        generation, shared = self._generation, self.shared
        if (shared is not None and shared.generation == generation and not shared.task.done()
                and shared.covers(keys)):
            with contextlib.suppress(Exception):  # not read: the fetch then reads alone
                await asyncio.shield(shared.task)
            return 0
        wanted = self._wanted(keys)
        kept = self.get(wanted)
        missing = {k for k in wanted if k not in kept}.union(keys)
        if len(missing) == len(set(keys)):
            return None
        read = self._start_read(generation, missing)
        try:
            return (await asyncio.shield(read.task))[1]
        except Exception:
            return None


def _expire(woken: asyncio.Future[bool]) -> None:
    if not woken.done():
        woken.set_result(False)
