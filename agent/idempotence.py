"""What an agent knows of idempotent producers, to answer a plain retry at once.

The metadata commit is the authority (metadata/producers.py: it re-checks every idempotent
batch in the transaction that commits it, since a retry may reach another agent at the same
time). The agent checks earlier, at produce time, against the producer's committed state as
it last knew it plus its own in-flight batches, so that:

- a resend of an in-flight batch shares the original's outcome (never buffered twice);
- a resend of a committed batch is answered at once with its original offset;
- a batch that is out of order or of an old epoch is refused without being buffered, but
  only after re-reading the committed state (another agent may have moved it on) and only
  when none of the producer's batches are in flight here (otherwise the commit decides).

The view is a bounded cache (least recently used entries without in-flight batches go
first); losing an entry only costs one metadata read. It is guarded by the agent's lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from metadata.models import ProducerBatch, ProducerState
from metadata.producers import Duplicate, advance, check_batch, current

Key = tuple[int, str, int]  # (producer id, topic, partition)
CACHED_PRODUCERS = 100_000  # (producer, partition) entries an agent remembers


@dataclass(slots=True)
class InFlight:
    """An idempotent batch buffered here and not yet settled; `handle` is how its produce
    future was made (the agent's flush future and the batch's relative offset)."""

    batch: ProducerBatch
    handle: Any


@dataclass(slots=True)
class _Entry:
    committed: ProducerState | None = None
    loaded: bool = False  # False: `committed` must be (re)read from the metadata store
    in_flight: list[InFlight] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Admit:
    """Buffer the batch (the commit re-checks it)."""


# What `ProducerTracker.check` says: buffer it, answer it like an in-flight batch, answer it
# with a committed offset, refuse it with an error, or read the committed state first.
Decision = Admit | InFlight | Duplicate | Exception | None


class ProducerTracker:
    """Per (producer, topic, partition): the last known committed state and the batches in
    flight here. Not thread-safe: the agent calls it holding its lock."""

    def __init__(self, expiration_ms: int, now_ms: Callable[[], int],
                 capacity: int = CACHED_PRODUCERS) -> None:
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._expiration_ms = expiration_ms
        self._now_ms = now_ms
        self._capacity = capacity

    def check(self, key: Key, batch: ProducerBatch, reloaded: bool) -> Decision:
        """The decision on `batch` (its offset_delta is not used); None: read the committed
        state (`learn`) and ask again with `reloaded=True`."""
        entry = self._entries.get(key)
        if entry is None or not entry.loaded:
            return None
        self._entries.move_to_end(key)
        for f in entry.in_flight:
            b = f.batch
            if (b.epoch, b.first_seq, b.last_seq) == (batch.epoch, batch.first_seq,
                                                      batch.last_seq):
                return f
        now = self._now_ms()
        tip = current(entry.committed, now, self._expiration_ms)
        for f in entry.in_flight:  # offsets of in-flight batches are not known yet
            tip = advance(tip, f.batch, -1, now)
        verdict = check_batch(tip, batch)
        if verdict is None:
            return Admit()
        if isinstance(verdict, Duplicate) or entry.in_flight:
            # A duplicate of an in-flight batch was found above; with batches in flight an
            # error may be stale (they may fail): let the commit decide.
            return verdict if isinstance(verdict, Duplicate) else Admit()
        return verdict if reloaded else None

    def learn(self, key: Key, state: ProducerState | None) -> None:
        """The committed state as just read from the metadata store."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            self._evict()
        entry.committed, entry.loaded = state, True

    def add(self, key: Key, batch: ProducerBatch, handle: Any) -> None:
        """`batch` (offset_delta set) is buffered; `handle` answers its resends."""
        self._entries[key].in_flight.append(InFlight(batch, handle))

    def settle(self, key: Key, batch: ProducerBatch, base_offset: int | None) -> None:
        """`batch` is done: stored by this agent at `base_offset`, or not (None: then the
        committed state is read again before the producer's next batch is judged)."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.in_flight = [f for f in entry.in_flight if f.batch is not batch]
        if base_offset is not None and entry.loaded:
            now = self._now_ms()
            entry.committed = advance(current(entry.committed, now, self._expiration_ms),
                                      batch, base_offset, now)
        else:
            entry.loaded = False

    def _evict(self) -> None:
        excess = len(self._entries) - self._capacity
        if excess <= 0:
            return
        for key in [k for k, e in self._entries.items() if not e.in_flight][:excess]:
            del self._entries[key]
