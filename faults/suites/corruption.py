"""The corruption suite: a bit flipped, or the object cut short, anywhere in one stored
object (hypothesis draws which object, where and which bit), then every partition read and
a compaction of everything run on it.

The promise checked: a read returns exactly the records it returns on the intact store, or
raises a format (checksum, framing, truncation) or range error whose message names the
corrupt object; never wrong data, never another error. A compaction job either commits
and the log then reads as Kafka's cleaner leaves it (the corrupt bytes were not ones it
uses: a header or footer), or fails naming the object and commits nothing.

The stored state (built once): four agent flushes to a delete-policy and a compacted topic,
compacted into one output, then two more flushes; so the objects are a compactor's output
and two agent objects. Each case runs on a copy (memory store, SQLite file).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import Agent, AgentConfig
from agent.reader import ConsumedRecord
from clock import ManualClock
from compactor import Compactor
from faults.check import TP, Tally, latest_per_key, read_logs
from fileformat import FormatError
from metadata import MetadataStore
from metadata.schema import FILE_LIVE
from objectstore import ObjectStore, open_store
from objectstore.errors import InvalidRangeError

TOPICS = (("d", 2, 0), ("c", 2, 4))  # (name, partitions, keys): delete policy, compacted
PARTITIONS = [(t, p) for t, n, _ in TOPICS for p in range(n)]
START_MS = 1_700_000_000_000
FLUSHES_BEFORE, FLUSHES_AFTER, RECORDS_PER_FLUSH = 4, 2, 12
# What a read or a compaction of a corrupt object may raise (with the object's key).
EXPECTED_ERRORS = (FormatError, InvalidRangeError)
KINDS = ("wrong_data", "unnamed_error", "other_error")


@dataclass
class Base:
    """The intact state every case copies, and what reading it returns."""

    root: Path
    objects: dict[str, bytes]  # every object (inputs of the compaction still await GC)
    live: list[str]  # the live files' objects, which a case corrupts
    before: dict[TP, list[ConsumedRecord]]  # as read now
    after: dict[TP, list[ConsumedRecord]]  # as read once compacted (Kafka's result)

    @property
    def db(self) -> Path:
        return self.root / "md.db"


def build(root: Path) -> Base:
    """Produce, compact, produce (module docstring); check the compacted result on a copy."""
    clock = ManualClock(START_MS)
    store_url = f"memory://chaos-corruption-{uuid.uuid4().hex}"
    store = open_store(store_url)
    md = MetadataStore.open(f"sqlite:///{root}/md.db", clock=clock, create=True)
    for name, partitions, keys in TOPICS:
        md.create_topic(name, partitions, {"cleanup.policy": "compact"} if keys else {})
    n = 0
    with Agent(store, md, AgentConfig(linger_ms=600_000), clock=clock) as agent:
        for flush in range(FLUSHES_BEFORE + FLUSHES_AFTER):
            if flush == FLUSHES_BEFORE:
                (report,) = Compactor(store, md, clock=clock).run_once(everything=True)
                assert report.outcome == "committed", report
            for _ in range(RECORDS_PER_FLUSH):
                topic, partitions, keys = TOPICS[n % len(TOPICS)]
                key = b"k%d" % (n % keys) if keys else None
                agent.produce(topic, n % partitions, key, b"v%d" % n)
                n += 1
            agent.flush()
    objects = {o.key: store.get(o.key) for o in store.list()}
    before = read_logs(store, md, PARTITIONS)
    live = sorted(f.object_key for f in md.audit_snapshot().files if f.state == FILE_LIVE)
    md.close()
    base = Base(root, objects, live, before, {})
    store, md = copy(base, root / "check")
    (report,) = Compactor(store, md, clock=ManualClock(START_MS)).run_once(everything=True)
    assert report.outcome == "committed", report
    base.after = read_logs(store, md, PARTITIONS)
    md.close()
    for (topic, _), log in base.after.items():
        want = (sorted(latest_per_key(before[topic, _]).values(), key=lambda r: r.offset)
                if topic == "c" else before[topic, _])
        assert log == want, f"{topic}-{_}: compaction of the intact store is not Kafka's"
    return base


def copy(base: Base, where: Path, corrupt: Callable[[str, bytes], bytes] | None = None,
         victim: str = "") -> tuple[ObjectStore, MetadataStore]:
    """A fresh copy of the base state, `victim`'s bytes passed through `corrupt`."""
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(base.db, where / "md.db")
    store = open_store(f"memory://chaos-corruption-{uuid.uuid4().hex}")
    for key, data in base.objects.items():
        store.put(key, corrupt(key, data) if corrupt and key == victim else data)
    return store, MetadataStore.open(f"sqlite:///{where}/md.db", clock=ManualClock(START_MS))


def damage(data: bytes, mode: str, position: int, bit: int) -> bytes:
    """A bit flipped at `position` (modulo the size), or the object cut to `position`."""
    if mode == "truncate":
        return data[:position % len(data)]
    pos = position % len(data)
    return data[:pos] + bytes([data[pos] ^ (1 << bit)]) + data[pos + 1:]


class Case:
    """Runs one case and counts its outcomes into `tally` and `outcomes`."""

    def __init__(self, base: Base, tally: Tally, outcomes: Counter[str]) -> None:
        self.base = base
        self.tally = tally
        self.outcomes = outcomes
        self.n = 0

    def __call__(self, victim: str, mode: str, position: int, bit: int) -> None:
        self.n += 1
        where = self.base.root / f"case{self.n}"
        store, md = copy(self.base, where, lambda _, d: damage(d, mode, position, bit), victim)
        what = f"{mode} at {position % len(self.base.objects[victim])} of {victim}"
        try:
            self._reads(store, md, victim, self.base.before, what)
            reports = Compactor(store, md, clock=ManualClock(START_MS)).run_once(
                everything=True)
            committed = any(r.outcome == "committed" for r in reports)
            for r in reports:
                self.outcomes[f"compaction {r.outcome}"] += 1
                if r.outcome != "committed":
                    self.tally.note("unnamed_error", int(victim not in (r.error or "")),
                                    f"{what}: compaction {r.outcome}: {r.error}")
            self._reads(store, md, victim,
                        self.base.after if committed else self.base.before, what)
        finally:
            md.close()
            store.delete_many(list(self.base.objects))
            shutil.rmtree(where, ignore_errors=True)

    def _reads(self, store: ObjectStore, md: MetadataStore, victim: str,
               want: dict[TP, list[ConsumedRecord]], what: str) -> None:
        for tp in PARTITIONS:
            try:
                got = read_logs(store, md, [tp])[tp]
            except EXPECTED_ERRORS as exc:
                named = victim in str(exc)
                self.outcomes["read: error naming the object" if named
                              else "read: error not naming it"] += 1
                self.tally.note("unnamed_error", int(not named), f"{what}: {exc!r}")
                continue
            except Exception as exc:
                self.outcomes["read: other error"] += 1
                self.tally.note("other_error", 1, f"{what}: {exc!r}")
                continue
            self.tally.read += len(got)
            right = got == want[tp]
            self.outcomes["read: right data" if right else "read: WRONG data"] += 1
            self.tally.note("wrong_data", int(not right), f"{what}: {tp} read differs")


def run(trials: int, seed: int) -> dict[str, Any]:
    """`trials` hypothesis cases drawn from `seed`; the figures (see faults/chaos.py)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st

    root = Path(tempfile.mkdtemp(prefix="silt-chaos-corruption-"))
    tally = Tally(KINDS)
    outcomes: Counter[str] = Counter()
    started = time.perf_counter()
    logging.disable(logging.CRITICAL)  # a failed job logs its traceback: judged here instead
    try:
        base = build(root)
        case = Case(base, tally, outcomes)
        biggest = max(len(d) for d in base.objects.values())

        @hypothesis_seed(seed)
        @settings(max_examples=trials, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(st.sampled_from(base.live), st.sampled_from(["flip", "truncate"]),
               st.integers(0, biggest - 1), st.integers(0, 7))
        def cases(victim: str, mode: str, position: int, bit: int) -> None:
            case(victim, mode, position, bit)

        cases()
    finally:
        logging.disable(logging.NOTSET)
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    return {
        "cases": case.n,
        "objects (live)": len(base.live),
        **{k: outcomes[k] for k in sorted(outcomes)},
        "records read back": tally.read,
        "wrong data": tally.counts["wrong_data"],
        "errors not naming the object": tally.counts["unnamed_error"],
        "other errors": tally.counts["other_error"],
        "seconds per case": round(elapsed / max(case.n, 1), 3),
        "violations": tally.violations(),
        "examples": tally.examples,
    }
