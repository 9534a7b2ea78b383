"""Reader.read_batches: the stored batches handed on undecoded, as Fetch serves them (absolute
baseOffsets, leader epoch -1), one ranged GET per segment, and decoding to exactly what
Reader.read returns on a compacted and retained log."""

from __future__ import annotations

from collections.abc import Iterator
from random import Random

import pytest

from agent import Agent, AgentConfig, Reader
from clock import ManualClock
from compactor import Compactor, CompactorConfig
from fileformat import build_batch, decode_batch
from fileformat.batch import read_header
from metadata import MetadataStore
from metadata.errors import OffsetOutOfRangeError
from objectstore import ObjectStore, open_store

KEYS = 20  # few keys over many records: compaction removes most offsets, leaving holes


def _batch(i: int) -> bytes:
    """Five records, keys drawn (seeded) from KEYS, so survivors are spread over the log."""
    return build_batch([(d, 1_700_000_000_000 + i, b"k%d" % Random(i * 5 + d).randrange(KEYS),
                         b"v%d-%d" % (i, d), [("h", b"%d" % d)] if d == 2 else [])
                        for d in range(5)])


@pytest.fixture
def log(s3_url: str, metadata_url: str, clock: ManualClock
        ) -> Iterator[tuple[ObjectStore, MetadataStore]]:
    """Partition 0 of `c`: three flushes compacted, two more after (an uncompacted tail),
    then the log start moved into the middle of a compacted segment by DeleteRecords."""
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    store = open_store(s3_url)
    md.create_topic("c", 1, configs={"cleanup.policy": "compact,delete"})
    with Agent(store, md, AgentConfig(linger_ms=3_600_000), clock=clock) as agent:
        for i in range(30):
            agent.produce_batch("c", 0, _batch(i))
            if i % 10 == 9:
                agent.flush()
    reports = Compactor(store, md, CompactorConfig(), clock=clock).run_once(everything=True)
    assert [r.outcome for r in reports] == ["committed"]
    with Agent(store, md, AgentConfig(linger_ms=3_600_000), clock=clock) as agent:
        for i in range(30, 50):
            agent.produce_batch("c", 0, _batch(i))
            if i % 10 == 9:
                agent.flush()
    kept = [r.offset for r in Reader(store, md).read("c", 0)]
    assert kept[0] > 0  # compaction removed the log's head
    result = md.delete_records({("c", 0): kept[2]})
    assert result[("c", 0)] == kept[2]
    yield store, md
    md.close()


def test_batches_decode_to_what_read_returns(log: tuple[ObjectStore, MetadataStore]) -> None:
    store, md = log
    reader = Reader(store, md)
    kept_start = md.partitions("c")[0].log_start_offset
    live = [r.offset for r in reader.read("c", 0, kept_start)]
    assert len(live) > 20
    holes = [o for o in range(live[0], live[-1]) if o not in set(live)]
    starts = [kept_start, live[1], holes[0], holes[-1], live[len(live) // 2], live[-1],
              live[-1] + 1]
    starts_below = 0
    for start in starts:
        batches = list(reader.read_batches("c", 0, from_offset=start))
        decoded = [rec for b in batches for rec in decode_batch(b)]  # verifies each CRC
        want = [(r.offset, r.timestamp, r.key, r.value, r.headers)
                for r in reader.read("c", 0, start)]
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers)
                for r in decoded if r.offset >= start] == want
        headers = [read_header(b) for b in batches]
        assert all(h.leader_epoch == -1 for h in headers)
        assert all(h.next_offset > start for h in headers)  # none wholly below start
        assert all(isinstance(b, memoryview) and b.readonly for b in batches)
        starts_below += bool(decoded) and decoded[0].offset < start
    assert starts_below  # a first batch started below from_offset (not split), as Kafka's
    assert list(reader.read_batches("c", 0, live[-1] + 1)) == []


def test_one_get_per_segment(log: tuple[ObjectStore, MetadataStore]) -> None:
    store, md = log
    start = md.partitions("c")[0].log_start_offset
    segments = md.find_segments("c", 0, start)
    assert len(segments) >= 3
    before = store.counters()
    batches = list(Reader(store, md).read_batches("c", 0, start))
    used = store.counters() - before
    assert len(segments) == used.GET
    assert len(batches) > len(segments)  # several batches per GET


def test_below_log_start_is_an_error(log: tuple[ObjectStore, MetadataStore]) -> None:
    store, md = log
    with pytest.raises(OffsetOutOfRangeError):
        list(Reader(store, md).read_batches("c", 0, 0))
