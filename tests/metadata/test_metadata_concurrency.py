"""Concurrent committers on separate handles never get overlapping offsets (both backends)."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

from metadata import MetadataStore
from metadata.errors import TopicExistsError
from tests.metadata.metadata_helpers import chunk, commit

WRITERS = 8
COMMITS_EACH = 40
TOPICS = {"a": 3, "b": 2}


def test_concurrent_committers_tile_offsets_exactly(metadata_url: str) -> None:
    setup = MetadataStore.open(metadata_url, create=True)
    for name, n in TOPICS.items():
        setup.create_topic(name, n)
    setup.close()

    barrier = threading.Barrier(WRITERS)
    # (topic, partition) -> [(base, span)], from the values commit_file returned.
    assigned: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        rng = random.Random(w)
        store = MetadataStore.open(metadata_url, create=True)  # its own handle and connection pool
        try:
            barrier.wait()
            for i in range(COMMITS_EACH):
                tps = [(t, p) for t, n in TOPICS.items() for p in range(n)]
                picked = rng.sample(tps, rng.randint(1, len(tps)))  # overlapping, any order
                chunks = [chunk(t, p, span=rng.randint(1, 9)) for t, p in picked]
                bases = commit(store, f"w{w}-{i}", chunks)
                with lock:
                    for c in chunks:
                        assigned[(c.topic, c.partition)].append(
                            (bases[(c.topic, c.partition)], c.offset_span))
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not errors, errors

    check = MetadataStore.open(metadata_url, create=True)
    try:
        total = 0
        for name, n in TOPICS.items():
            for part in check.partitions(name):
                ranges = sorted(assigned[(name, part.partition)])
                total += len(ranges)
                # [base, base + span) ranges tile 0..next_offset with no gap and no overlap.
                pos = 0
                for base, span in ranges:
                    assert base == pos, (name, part.partition, ranges)
                    pos += span
                assert pos == part.next_offset
                segs = check.find_segments(name, part.partition, 0)
                assert [(s.base_offset, s.offset_span) for s in segs] == ranges
            assert len(check.partitions(name)) == n
        assert total == sum(len(v) for v in assigned.values())
        assert check.stats().files_by_state == {"live": WRITERS * COMMITS_EACH}
    finally:
        check.close()


def test_concurrent_create_topic_one_winner(metadata_url: str) -> None:
    MetadataStore.open(metadata_url, create=True).close()
    barrier = threading.Barrier(WRITERS)
    outcomes: list[str] = []

    def creator() -> None:
        store = MetadataStore.open(metadata_url, create=True)
        try:
            barrier.wait()
            store.create_topic("t", 4)
            outcomes.append("created")
        except TopicExistsError:
            outcomes.append("exists")
        finally:
            store.close()

    threads = [threading.Thread(target=creator) for _ in range(WRITERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert sorted(outcomes) == ["created"] + ["exists"] * (WRITERS - 1)
    store = MetadataStore.open(metadata_url, create=True)
    assert len(store.partitions("t")) == 4
    store.close()


def test_threads_sharing_one_handle(metadata_url: str) -> None:
    """One handle shared by threads (the agent's flusher + callers) is also safe."""
    store = MetadataStore.open(metadata_url, create=True)
    store.create_topic("t", 1)
    spans: list[tuple[int, int]] = []
    lock = threading.Lock()

    def run(w: int) -> None:
        for i in range(10):
            base = commit(store, f"s{w}-{i}", [chunk("t", 0, w + 1)])[("t", 0)]
            with lock:
                spans.append((base, w + 1))

    threads = [threading.Thread(target=run, args=(w,)) for w in range(WRITERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    pos = 0
    for base, span in sorted(spans):
        assert base == pos
        pos += span
    assert pos == store.partitions("t")[0].next_offset == 10 * sum(range(1, WRITERS + 1))
    store.close()
