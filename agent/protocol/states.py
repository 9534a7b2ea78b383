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

A notification wakes every waiting long-poll and forgets every entry, so they would all
miss at once: the first to miss reads the offsets of every partition a waiting long-poll
wants in one statement (`SharedRead`, agent/protocol/apis/fetch.py `_share`) and the others
await it, so it answers on the event loop all those with nothing new.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from metadata import PartitionInfo

Key = tuple[str, int]
"""(topic name, partition)."""
Known = tuple[int, PartitionInfo]
"""A partition's topic row id (the incarnation read) and its offsets."""


@dataclass(frozen=True, slots=True, eq=False)
class SharedRead:
    """A read begun at `generation` that keeps the offsets of partitions `numbers` of
    `topics`, which long-polls missing only some of them await rather than each reading its
    own (`task`: its round trips)."""

    generation: int
    topics: frozenset[str]
    numbers: frozenset[int]
    task: asyncio.Future[int]


class PartitionStates:
    """The cache (thread-safe: fetch reads run in the pool, notifications come from any
    thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._known: dict[Key, Known] = {}
        # Whether the commit watcher hears every commit now (none until one is attached).
        self.hearing: Callable[[], bool] = lambda: False
        # On the event loop only: the partitions waiting long-polls want (how many want
        # each), and the last shared read of offsets.
        self._waiting: dict[Key, int] = {}
        self.shared: SharedRead | None = None

    def generation(self) -> int:
        """The current generation: take it BEFORE reading what `put` will store."""
        return self._generation

    def changed(self) -> None:
        """A commit was notified: forget everything (any thread)."""
        with self._lock:
            self._generation += 1
            self._known = {}

    def get(self, keys: Iterable[Key]) -> dict[Key, Known]:
        """The entries known for `keys` (none while the watcher is deaf)."""
        if not self.hearing():
            return {}
        known = self._known  # replaced whole by `changed`, never mutated after
        return {k: known[k] for k in keys if k in known}

    def put(self, generation: int, entries: Mapping[Key, Known]) -> None:
        """Keep `entries`, read after `generation()` returned `generation`, unless a
        notification came since (or the watcher is deaf)."""
        if not entries or not self.hearing():
            return
        with self._lock:
            if generation == self._generation:
                self._known = {**self._known, **entries}

    def waiting(self) -> list[Key]:
        """The partitions long-polls waiting now want (on the loop)."""
        return list(self._waiting)

    def wait(self, keys: Iterable[Key]) -> None:
        """A long-poll waits for `keys` (on the loop; `done` when it answers)."""
        for k in keys:
            self._waiting[k] = self._waiting.get(k, 0) + 1

    def done(self, keys: Iterable[Key]) -> None:
        """A long-poll that waited for `keys` answered (on the loop)."""
        for k in keys:
            n = self._waiting.pop(k) - 1
            if n:
                self._waiting[k] = n
