"""Shared helpers for compaction tests: a log model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agent import Agent, AgentConfig, Reader
from clock import ManualClock
from compactor import Compactor, CompactorConfig
from metadata import MetadataStore
from objectstore import ObjectStore

Rec = tuple[int, bytes | None, bytes | None]  # offset, key, value


@dataclass
class Env:
    store: ObjectStore
    md: MetadataStore
    clock: ManualClock
    produced: dict[tuple[str, int], list[Rec]] = field(default_factory=dict)

    def produce(self, topic: str, rows: Sequence[tuple[int, bytes | None, bytes | None]]) -> None:
        """rows: (partition, key, value); records the offsets the agent assigns."""
        with Agent(self.store, self.md, AgentConfig(linger_ms=60_000), clock=self.clock) as a:
            futs = [(p, k, v, a.produce(topic, p, k, v)) for p, k, v in rows]
        for p, k, v, f in futs:
            self.produced.setdefault((topic, p), []).append((f.result(), k, v))

    def read(self, topic: str, partition: int, start: int = 0) -> list[Rec]:
        return [(r.offset, r.key, r.value)
                for r in Reader(self.store, self.md).read(topic, partition, start)]

    def compactor(self, **cfg: object) -> Compactor:
        return Compactor(self.store, self.md, CompactorConfig(**cfg),  # type: ignore[arg-type]
                         clock=self.clock)


def latest_per_key(records: list[Rec]) -> dict[bytes | None, Rec]:
    out: dict[bytes | None, Rec] = {}
    for rec in records:
        out[rec[1]] = rec
    return out
