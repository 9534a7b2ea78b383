"""What the chaos suites check after a trial: acknowledged records, Kafka's compaction
result, and objects against the metadata; each finding is counted in a `Tally`."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from agent import ConsumedRecord, Reader
from metadata import MetadataStore
from metadata.schema import FILE_LIVE
from objects.keys import MARKER_KEY
from objectstore import ObjectStore

TP = tuple[str, int]
# An acknowledged record: (offset, key, value).
Ack = tuple[int, bytes | None, bytes]
MAX_EXAMPLES = 5  # failure messages kept per tally


class Keyed(Protocol):
    @property
    def key(self) -> bytes | None: ...


K = TypeVar("K", bound=Keyed)


def latest_per_key(records: Iterable[K]) -> dict[bytes | None, K]:
    """Each key's last record in `records` (given in offset order): what Kafka's log cleaner
    keeps of a fully cleaned log (tombstones aside, which are kept for delete.retention.ms)."""
    out: dict[bytes | None, K] = {}
    for rec in records:
        out[rec.key] = rec
    return out


# Violation kinds (each count's promise is 0).
CRASH_KINDS = (
    "lost",  # acked and not readable (nor superseded by a later record of its key)
    "duplicated",  # a record read more than once
    "out_of_order",  # offsets not strictly increasing, or an acked record at another offset
    "unknown",  # a record read that no agent produced
    "compaction_mismatch",  # a compacted log other than the one Kafka's cleaner leaves
    "orphans",  # objects no live file references (after GC)
    "missing",  # live files whose object is gone
    "dangling_segments",  # segment rows whose file or partition row is gone
)


@dataclass
class Tally:
    """Records checked and violations found over a suite's trials, by kind (`kinds`, the
    ones the suite reports); `examples` keeps the first few violations, described."""

    kinds: tuple[str, ...] = CRASH_KINDS
    acked: int = 0  # acknowledged records checked
    read: int = 0  # records read back
    counts: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def violations(self) -> int:
        return sum(self.counts.values())

    def note(self, kind: str, count: int, example: str) -> None:
        """Count `count` violations of `kind` (nothing if 0), describing the first few."""
        assert kind in self.kinds, kind
        if count:
            self.counts[kind] += count
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append(f"{kind}: {example}")

    def figures(self) -> dict[str, int]:
        return {"acked": self.acked, "read": self.read,
                **{kind: self.counts[kind] for kind in self.kinds}}

    def outcome(self, errors: list[str], seconds: float, trials: int) -> dict[str, Any]:
        """The figures every process-running suite ends with: these records' `figures`, the
        processes that failed (`errors`, each a violation), time per trial, the total and
        the first examples."""
        return {**self.figures(), "process errors": len(errors),
                "seconds per trial": round(seconds / max(trials, 1), 3),
                "violations": self.violations() + len(errors),
                "examples": self.examples + errors[:5]}


def read_acks(path: Path) -> dict[TP, list[Ack]]:
    """The acknowledged records an agent process wrote (faults/procs.py), per partition."""
    acked: dict[TP, list[Ack]] = {}
    if not path.exists():
        return acked
    for line in path.read_text().splitlines():
        topic, partition, offset, key, value = line.split(" ")
        acked.setdefault((topic, int(partition)), []).append(
            (int(offset), None if key == "-" else key.encode(), value.encode()))
    return acked


def read_logs(store: ObjectStore, md: MetadataStore, partitions: Iterable[TP]
              ) -> dict[TP, list[ConsumedRecord]]:
    reader = Reader(store, md)
    return {tp: list(reader.read(*tp)) for tp in partitions}


def check_log(tally: Tally, tp: TP, log: Sequence[ConsumedRecord], acked: Sequence[Ack],
              tags: Sequence[str], *, compacted: bool) -> None:
    """Every acked record is read exactly once at its offset (on a compacted topic: or a
    later record of its key is), offsets increase, every record read was produced."""
    tally.acked += len(acked)
    tally.read += len(log)
    offsets = [r.offset for r in log]
    tally.note("out_of_order", sum(b <= a for a, b in itertools.pairwise(offsets)),
               f"{tp} offsets {offsets[:20]}")
    counts = Counter(r.value for r in log)
    dups = [v for v, n in counts.items() if n > 1]
    tally.note("duplicated", len(dups), f"{tp} {dups[:3]}")
    strangers = [r.value for r in log if r.value is None
                 or not r.value.decode(errors="replace").startswith(tuple(tags))]
    tally.note("unknown", len(strangers), f"{tp} {strangers[:3]}")
    at = {r.value: r.offset for r in log}
    last_of_key = {r.key: r.offset for r in log}
    lost = moved = 0
    for offset, key, value in acked:
        if value in at:
            moved += at[value] != offset
        elif not compacted or last_of_key.get(key, -1) <= offset:
            lost += 1
    tally.note("lost", lost, f"{tp}: {lost} of {len(acked)} acked records")
    tally.note("out_of_order", moved, f"{tp}: {moved} acked records at another offset")


def check_compacted(tally: Tally, tp: TP, before: Sequence[ConsumedRecord],
                    after: Sequence[ConsumedRecord]) -> None:
    """`after` (the log once fully compacted) is Kafka's cleaner's result on `before`."""
    want = sorted(latest_per_key(before).values(), key=lambda r: r.offset)
    tally.note("compaction_mismatch", int(list(after) != want),
               f"{tp}: {len(after)} records, Kafka's cleaner keeps {len(want)}")


def check_objects(tally: Tally, store: ObjectStore, md: MetadataStore) -> None:
    """After GC: every object is a live file's and every live file's object exists, and
    every segment row's file and partition exist."""
    audit = md.audit_snapshot()
    live = {f.object_key for f in audit.files if f.state == FILE_LIVE}
    tally.note("dangling_segments", len(audit.dangling), f"{audit.dangling[:3]}")
    stored = {o.key for o in store.list() if o.key != MARKER_KEY}
    tally.note("orphans", len(stored - live), f"{sorted(stored - live)[:3]}")
    tally.note("missing", len(live - stored), f"{sorted(live - stored)[:3]}")
