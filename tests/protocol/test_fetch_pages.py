"""A Fetch's segments past each partition's first page (`_Pages`): read for the later
partitions of the request together, in one statement, not one per partition, and what the
fetch returns is exactly what reading each partition on its own returns (every budget,
offset and isolation level), on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.fetch.v12 import request as f12
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

import telemetry
from agent import Agent, AgentConfig
from agent.protocol.apis import fetch
from agent.protocol.context import ServerContext
from fileformat import build_batch
from metadata import MetadataStore, SegmentInfo
from objectstore import open_backend

from .server import local_context

TOPIC = "pages"
PARTITIONS = 24
FLUSHES = fetch.FIRST_SEGMENTS + 6  # segments per partition: past the first page


@pytest.fixture
def ctx(tmp_path: Path, metadata_url: str) -> Iterator[ServerContext]:
    """A log of FLUSHES segments in each partition (1-5 records of 100-900 bytes a batch,
    so segment sizes vary), and the fetch's context on it."""
    store = open_backend(f"file://{tmp_path}/objects")
    md = MetadataStore.open(metadata_url, create=True)
    md.create_topic(TOPIC, PARTITIONS)
    config = AgentConfig(linger_ms=600_000)
    agent = Agent(store, md, config)
    rng = random.Random(5)
    try:
        for _ in range(FLUSHES):
            for p in range(PARTITIONS):
                n = rng.randint(1, 5)
                agent.produce_batch(TOPIC, p, build_batch(
                    [(i, 1_000 + i, b"k%d" % i, b"v" * rng.randint(100, 900), [])
                     for i in range(n)]))
            agent.flush()  # one segment per partition
        yield local_context(agent, md, store, config, cache_bytes=64 << 20)
    finally:
        agent.close()
        md.close()


def _request(offsets: list[int], partition_max: list[int], max_bytes: int,
             committed: bool = False) -> f12.FetchRequest:
    return f12.FetchRequest(
        max_wait=i32Timedelta.parse(timedelta(0)), min_bytes=i32(1), max_bytes=i32(max_bytes),
        isolation_level=i8(1 if committed else 0),
        topics=(f12.FetchTopic(topic=TopicName(TOPIC), partitions=tuple(
            f12.FetchPartition(partition=i32(p), fetch_offset=i64(offsets[p]),
                               partition_max_bytes=i32(partition_max[p]))
            for p in range(PARTITIONS))),), forgotten_topics_data=())


def _read(ctx: ServerContext, request: f12.FetchRequest) -> tuple[list[tuple[int, int, bytes]],
                                                                  int]:
    """Each partition's (index, error, records) and the metadata round trips the read made."""
    before = telemetry.round_trips_here()
    results = fetch.read_all(ctx, request, fetch.requested(request), lambda _: True)
    trips = telemetry.round_trips_here() - before
    return [(r.index, int(r.error.value), b"".join(bytes(v) for v in r.records))
            for _, _, reads in results for r in reads], trips


def _alone(self: fetch._Pages, topic: str, index: int, position: int, wanted: int,
           after: int) -> tuple[int, list[SegmentInfo]]:
    """A partition's next page read on its own (what a fetch did before `_Pages`)."""
    return fetch.SEGMENTS_PER_QUERY, self.ctx.metadata.find_segments(
        topic, index, position, limit=fetch.SEGMENTS_PER_QUERY)


def test_a_fetch_of_partitions_far_behind_reads_their_later_segments_together(
        ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request([0] * PARTITIONS, [1 << 20] * PARTITIONS, 50 << 20)
    together, trips = _read(ctx, request)
    # Their offsets and first pages in one statement, the rest of every partition in one
    # more (none of them needing more than its first page's sizes promise).
    assert trips == 2, trips
    monkeypatch.setattr(fetch._Pages, "next", _alone)
    alone, trips_alone = _read(ctx, request)
    assert trips_alone > PARTITIONS  # what it cost: a read per partition (and its BEGIN...)
    assert together == alone
    assert all(records for _, _, records in together)


def test_what_a_fetch_returns_is_what_reading_each_partition_alone_returns(
        ctx: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    ends = [info.next_offset for info in ctx.metadata.partitions(TOPIC)]
    requests = []
    for _ in range(40):
        offsets = [rng.choice((0, 0, rng.randint(0, end))) for end in ends]
        partition_max = [rng.choice((1, 500, 3_000, 20_000, 1 << 20)) for _ in ends]
        max_bytes = rng.choice((1, 2_000, 30_000, 150_000, 50 << 20))
        requests.append(_request(offsets, partition_max, max_bytes, rng.random() < 0.3))
    together = [_read(ctx, request)[0] for request in requests]
    monkeypatch.setattr(fetch._Pages, "next", _alone)
    alone = [_read(ctx, request)[0] for request in requests]
    for i, (mine, theirs) in enumerate(zip(together, alone, strict=True)):
        assert mine == theirs, i
