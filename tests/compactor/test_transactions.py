"""The compaction oracle learns transactions: a random workload of committed and aborted
transactions (several producers, interleaved) mixed with plain produces, compacted at
random moments, must read exactly what Kafka's cleaner rules leave, under read_committed
and read_uncommitted, on SQLite and PostgreSQL:

- nothing at or past the last stable offset is cleaned (an open transaction's records and
  everything after them stay as written);
- records of aborted transactions never enter the offset map (a committed record of the
  same key survives them) and are dropped whatever their keys;
- below the LSO each key keeps its latest committed record (`latest_per_key` over the
  committed records, the one reference); markers are never records to a reader;
- a COMMIT/ABORT marker goes once no record of its transaction is left and its delete
  horizon passed: delete.retention.ms after the first clean that found its transaction's
  records gone (Kafka's CleanedTransactionMetadata and deleteHorizonMs); an ABORT
  marker's aborted-transaction index row goes with it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from agent import Agent, AgentConfig, Reader
from agent.producer import ProduceFuture
from clock import ManualClock
from fileformat.batch import read_header
from fileformat.control import build_marker
from tests.compactor.support import START_MS, Harness, latest_per_key

RETENTION_MS = 2500
COMPACT = {"cleanup.policy": "compact", "delete.retention.ms": str(RETENTION_MS)}
KEYS = [b"k%d" % i for i in range(8)]


@dataclass
class Entry:
    """One record of the model log."""

    offset: int
    key: bytes
    value: bytes
    producer: int | None  # a transaction's producer, None: a plain record
    present: bool = True


@dataclass
class Marker:
    """One COMMIT/ABORT marker of the model log."""

    offset: int
    txn: tuple[int, int | None]  # (producer, the transaction's first offset)
    commit: bool
    horizon_from: int | None = None  # the clean that first found its records gone
    present: bool = True


@dataclass
class Txn:
    producer: int
    seq: int = 0
    first: int | None = None


@pytest.fixture
def h(metadata_url: str) -> Iterator[Harness]:
    harness = Harness.open(metadata_url, clock=ManualClock(START_MS))
    yield harness
    harness.close()


def _batch(pid: int, seq: int, kvs: list[tuple[bytes, bytes]], transactional: bool) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional,
        producer_id=pid if transactional else -1, producer_epoch=0 if transactional else -1,
        base_sequence=seq if transactional else -1, batch_size=1 << 20)
    for i, (k, v) in enumerate(kvs):
        builder.append(i, timestamp=START_MS + i, key=k, value=v, headers=[])
    return bytes(builder.build())


class Model:
    """The partition as Kafka's cleaner would leave it."""

    def __init__(self) -> None:
        self.log: list[Entry] = []
        self.end = 0  # the high watermark
        self.open: dict[int, Txn] = {}  # producer -> its open transaction
        self.aborted: set[tuple[int, int]] = set()  # (producer, first offset)
        self.txn_of: dict[int, tuple[int, int]] = {}  # offset -> (producer, txn's first)
        self.seqs: dict[int, int] = {}  # producer -> its next sequence (across transactions)
        self.markers: list[Marker] = []

    def stable(self) -> int:
        firsts = [t.first for t in self.open.values() if t.first is not None]
        return min(firsts, default=self.end)

    def aborted_entry(self, e: Entry) -> bool:
        return e.offset in self.txn_of and self.txn_of[e.offset] in self.aborted

    def clean(self, now_ms: int, ran: bool = True) -> None:
        """A whole-log clean up to the LSO (the offset map holds every key); `ran` False:
        the planner saw nothing to do (nothing dirty, no horizon passed since the log's
        last clean), so nothing changes."""
        if not ran:
            return
        upto = self.stable()
        below = [e for e in self.log if e.present and e.offset < upto]
        for e in below:
            if self.aborted_entry(e):
                e.present = False
        survivors = {id(e) for e in latest_per_key(
            e for e in below if e.present).values()}
        for e in below:
            if e.present and id(e) not in survivors:
                e.present = False
        left = {self.txn_of[e.offset] for e in self.log if e.present and e.offset in self.txn_of}
        for m in self.markers:
            if not m.present or m.offset >= upto or m.txn in left:
                continue
            if m.horizon_from is None:
                m.horizon_from = now_ms
            elif m.horizon_from + RETENTION_MS <= now_ms:
                m.present = False

    def marker_offsets(self) -> list[int]:
        return [m.offset for m in self.markers if m.present]

    def aborted_index(self) -> list[tuple[int, int, int]]:
        """(producer, first offset, marker offset) of the aborted transactions indexed."""
        return sorted((m.txn[0], m.txn[1], m.offset) for m in self.markers
                      if m.present and not m.commit and m.txn[1] is not None)

    def committed_view(self) -> list[tuple[int, bytes, bytes]]:
        upto = self.stable()
        return [(e.offset, e.key, e.value) for e in self.log
                if e.present and e.offset < upto and not self.aborted_entry(e)]

    def uncommitted_view(self) -> list[tuple[int, bytes, bytes]]:
        return [(e.offset, e.key, e.value) for e in self.log if e.present]


def _now(agent: Agent, fut: ProduceFuture) -> int:
    """The offset of a produce, flushed at once (the agent lingers otherwise)."""
    agent.flush()
    return fut.result()


def _read(h: Harness, committed: bool) -> list[tuple[int, bytes, bytes]]:
    return [(r.offset, r.key or b"", r.value or b"")
            for r in Reader(h.store, h.md).read("t", 0, 0, committed=committed)]


def _clean(h: Harness) -> bool:
    """Run what the planner proposes on compacting everything; whether a job committed."""
    return any(r.outcome == "committed" for r in h.compactor().run_once(everything=True))


def _check_markers(h: Harness, model: Model) -> None:
    """The markers stored, and the aborted-transaction index, are the model's."""
    stored = [read_header(b) for b in Reader(h.store, h.md).read_batches("t", 0)]
    assert [b.base_offset for b in stored if b.is_control] == model.marker_offsets()
    index = h.md.aborted_transactions([("t", 0, 0, model.end + 1)]).get(("t", 0), [])
    assert sorted((a.producer_id, a.first_offset, a.last_offset) for a in index) \
        == model.aborted_index()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_transactions_compacted_at_random_moments(h: Harness, seed: int) -> None:
    rnd = random.Random(seed)
    h.md.create_topic("t", 1, COMPACT)
    producers = [h.md.allocate_producer_id() for _ in range(3)]
    model = Model()
    counter = 0
    cleans = 0
    for _ in range(45):
        action = rnd.random()
        with Agent(h.store, h.md, AgentConfig(linger_ms=600_000), clock=h.clock) as agent:
            if action < 0.3:  # a plain batch
                kvs = [(rnd.choice(KEYS), b"p%d" % (counter + i))
                       for i in range(rnd.randint(1, 3))]
                counter += len(kvs)
                base = _now(agent, agent.produce_batch("t", 0, _batch(-1, -1, kvs, False)))
                model.log += [Entry(base + i, k, v, None) for i, (k, v) in enumerate(kvs)]
                model.end = base + len(kvs)
            elif action < 0.7:  # a transactional batch (opening a transaction if none)
                pid = rnd.choice(producers)
                txn = model.open.setdefault(pid, Txn(pid, seq=model.seqs.get(pid, 0)))
                kvs = [(rnd.choice(KEYS), b"t%d" % (counter + i))
                       for i in range(rnd.randint(1, 3))]
                counter += len(kvs)
                base = _now(agent, agent.produce_batch("t", 0, _batch(pid, txn.seq, kvs, True)))
                txn.seq += len(kvs)
                if txn.first is None:
                    txn.first = base
                for i, (k, v) in enumerate(kvs):
                    model.log.append(Entry(base + i, k, v, pid))
                    model.txn_of[base + i] = (pid, txn.first)
                model.end = base + len(kvs)
            elif model.open:  # a marker ends one open transaction
                pid = rnd.choice(sorted(model.open))
                commit = rnd.random() < 0.5
                at = _now(agent, agent.produce_batch("t", 0, build_marker(
                    pid, 0, commit=commit, coordinator_epoch=0, timestamp_ms=START_MS),
                    coordinator=True))
                txn = model.open.pop(pid)
                model.seqs[pid] = txn.seq
                model.markers.append(Marker(at, (pid, txn.first), commit))
                if not commit and txn.first is not None:
                    model.aborted.add((pid, txn.first))
                model.end = at + 1
        if rnd.random() < 0.3:  # compaction at a random moment
            h.clock.advance(1000)
            model.clean(h.clock.now_ms(), _clean(h))
            cleans += 1
            assert _read(h, True) == model.committed_view()
            assert _read(h, False) == model.uncommitted_view()
            _check_markers(h, model)
        info = h.md.partitions("t")[0]
        assert (info.last_stable_offset, info.next_offset) == (model.stable(), model.end)
    # Every transaction ends; a last clean leaves one record per key, none aborted.
    with Agent(h.store, h.md, AgentConfig(linger_ms=600_000), clock=h.clock) as agent:
        for pid in sorted(model.open):
            at = _now(agent, agent.produce_batch("t", 0, build_marker(
                pid, 0, commit=False, coordinator_epoch=0, timestamp_ms=START_MS),
                coordinator=True))
            txn = model.open.pop(pid)
            if txn.first is not None:
                model.aborted.add((pid, txn.first))
            model.end = max(model.end, at + 1)
            model.markers.append(Marker(at, (pid, txn.first), False))
    h.clock.advance(1000)
    model.clean(h.clock.now_ms(), _clean(h))
    assert _read(h, True) == model.committed_view() == _read(h, False)
    assert len({k for _, k, _ in model.committed_view()}) == len(model.committed_view())
    assert cleans >= 3  # the random moments did come
    _check_markers(h, model)
    written = len(model.markers)
    before = len(model.marker_offsets())
    # Before the horizon a marker whose transaction is gone stays; past it, it goes (the
    # ones whose committed records are still the latest of their keys stay for good).
    h.clock.advance(RETENTION_MS - 1)
    model.clean(h.clock.now_ms(), _clean(h))
    _check_markers(h, model)
    h.clock.advance(RETENTION_MS)
    model.clean(h.clock.now_ms(), _clean(h))
    _check_markers(h, model)
    after = len(model.marker_offsets())
    assert _read(h, True) == model.committed_view() == _read(h, False)
    left = {model.txn_of[o] for o, _, _ in model.committed_view() if o in model.txn_of}
    assert {m.txn for m in model.markers if m.present} == left  # only markers guarding records
    assert not model.aborted_index()
    print(f"seed {seed}: markers written {written}, after the first cleans {before},"
          f" past the horizon {after}")
    assert after < before <= written
