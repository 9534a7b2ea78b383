"""Harness for the compaction suite: a producer that remembers everything it
produced (offset, timestamp, key, value, headers), readers, and the invariants every
compacted log must satisfy against that record."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent import Agent, AgentConfig, Reader
from clock import ManualClock
from compactor import Compactor, CompactorConfig
from faults.check import latest_per_key as latest_per_key  # the one reference (Kafka's)
from metadata import MetadataStore
from objectstore import ObjectStore, open_store

Headers = tuple[tuple[str, bytes | None], ...]
TP = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Rec:
    """A record as produced / as read back: everything that must survive compaction."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


# A produce row: (topic, partition, key, value, headers).
Row = tuple[str, int, bytes | None, bytes | None, Headers]

START_MS = 1_700_000_000_000


@dataclass
class Harness:
    store: ObjectStore
    md: MetadataStore
    clock: ManualClock
    store_url: str = ""
    produced: dict[TP, list[Rec]] = field(default_factory=dict)

    @classmethod
    def open(cls, metadata_url: str, store_url: str | None = None,
             clock: ManualClock | None = None) -> Harness:
        clock = clock or ManualClock(START_MS)
        store_url = store_url or f"memory://compaction-{uuid.uuid4().hex}"
        md = MetadataStore.open(metadata_url, clock=clock, create=True)
        return cls(open_store(store_url), md, clock, store_url)

    def close(self) -> None:
        self.md.close()

    # ------------------------------------------------------------ produce / read

    def produce(self, rows: Iterable[Row]) -> None:
        """One agent session (one flush, so one object), remembering the assigned offsets."""
        with Agent(self.store, self.md, AgentConfig(linger_ms=600_000),
                   clock=self.clock) as agent:
            futs = [(t, p, k, v, h, agent.produce(t, p, k, v, h)) for t, p, k, v, h in rows]
        ts = self.clock.now_ms()
        for t, p, k, v, h, f in futs:
            self.produced.setdefault((t, p), []).append(Rec(f.result(), ts, k, v, h))
        for recs in self.produced.values():
            recs.sort(key=lambda r: r.offset)

    def produce_kv(self, topic: str, kvs: Sequence[tuple[bytes | None, bytes | None]],
                   partition: int = 0) -> None:
        self.produce([(topic, partition, k, v, ()) for k, v in kvs])

    def read(self, topic: str, partition: int = 0, start: int = 0) -> list[Rec]:
        return [Rec(r.offset, r.timestamp, r.key, r.value, r.headers)
                for r in Reader(self.store, self.md).read(topic, partition, start)]

    def kv(self, topic: str, partition: int = 0, start: int = 0
           ) -> list[tuple[int, bytes | None, bytes | None]]:
        return [(r.offset, r.key, r.value) for r in self.read(topic, partition, start)]

    def compactor(self, store: Any = None, md: MetadataStore | None = None,
                  **cfg: Any) -> Compactor:
        return Compactor(store if store is not None else self.store, md or self.md,
                         CompactorConfig(**cfg), clock=self.clock)

    def everything(self) -> dict[TP, list[Rec]]:
        """Every partition we produced to, as read now."""
        return {tp: self.read(*tp) for tp in self.produced}

    def object_keys(self) -> set[str]:
        return {o.key for o in self.store.list()}

    def live_keys(self) -> set[str]:
        return {f.object_key for f in self.md.snapshot().files}


def assert_preserved(got: list[Rec], produced: list[Rec]) -> None:
    """Offsets strictly increasing; every record read is exactly the one produced at its
    offset (timestamp, key, value, headers): the compacted log is a subsequence."""
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets)), f"offsets not strictly increasing: {offsets}"
    by_offset = {r.offset: r for r in produced}
    for r in got:
        assert by_offset.get(r.offset) == r, f"record at {r.offset} changed: {r}"


def assert_compacted_invariants(got: list[Rec], produced: list[Rec]) -> None:
    """The latest record of every key is there (a tombstone may be gone, but then so is
    every older record of its key); no older record of a key survives as its latest."""
    assert_preserved(got, produced)
    latest = latest_per_key(produced)
    got_latest = latest_per_key(got)
    for key, rec in latest.items():
        if rec.value is not None:
            assert rec in got, f"latest value of {key!r} lost: {rec}"
        if key in got_latest:
            assert got_latest[key] == rec, (
                f"key {key!r}: {got_latest[key]} resurfaced as latest instead of {rec}")
