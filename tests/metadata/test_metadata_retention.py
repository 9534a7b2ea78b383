"""Retention (retention.ms, retention.bytes) on SQLite and PostgreSQL: a prefix of each
delete-policy partition goes, the log start moves, emptied files are retired for GC, leased
files wait, and a compaction whose inputs lost segments is refused."""

from __future__ import annotations

import dataclasses

import pytest

from clock import ManualClock
from metadata import ChunkMeta, CompactionOutput, MetadataStore, OutputSegment
from metadata import schema as s
from metadata.errors import CommitConflictError, OffsetOutOfRangeError
from tests.layouts import layout
from tests.metadata.metadata_helpers import chunk, commit

DAY = 86_400_000


def stamped(topic: str, partition: int, span: int, max_ts: int) -> ChunkMeta:
    """A chunk whose newest record has timestamp `max_ts`."""
    return dataclasses.replace(chunk(topic, partition, span), min_timestamp=max_ts - 1,
                               max_timestamp=max_ts)


def test_time_retention_removes_an_old_prefix(store: MetadataStore, clock: ManualClock) -> None:
    now = clock.now_ms()
    store.create_topic("d", 2, {"retention.ms": str(DAY)})
    store.create_topic("c", 1, {"cleanup.policy": "compact", "retention.ms": str(DAY)})
    commit(store, "f1", [stamped("c", 0, 5, now - 3 * DAY), stamped("d", 0, 5, now - 3 * DAY),
                         stamped("d", 1, 5, now - 3 * DAY)])
    commit(store, "f2", [stamped("d", 0, 5, now - 2 * DAY)])
    commit(store, "f3", [stamped("d", 0, 5, now), stamped("d", 1, 5, now - 2 * DAY)])
    # Not a prefix: an old segment after a young one stays (Kafka stops at the first keeper).
    commit(store, "f4", [stamped("d", 0, 5, now - 5 * DAY)])

    result = store.apply_retention()
    got = {(c.topic, c.partition): (c.log_start_offset, c.segments, c.records, c.bytes)
           for c in result.changes}
    assert got == {("d", 0): (10, 2, 10, 200), ("d", 1): (10, 2, 10, 200)}
    f2 = store.files_to_gc(clock.now_ms())
    assert [f.object_key for f in f2] == ["f2"]  # f1 still holds c/0; f3 holds d/0
    assert result.retired_file_ids == (f2[0].id,)
    parts = {p.partition: p for p in store.partitions("d")}
    assert (parts[0].log_start_offset, parts[0].next_offset) == (10, 20)
    assert (parts[1].log_start_offset, parts[1].next_offset) == (10, 10)
    assert parts[0].clean_offset == 10
    with pytest.raises(OffsetOutOfRangeError):
        store.find_segments("d", 0, 9)
    assert [x.base_offset for x in store.find_segments("d", 0, 10)] == [10, 15]
    assert store.find_segments("d", 1, 10) == []
    assert store.partitions("c")[0].log_start_offset == 0  # compact-only: no retention
    # Nothing more is due; a day later the young segment goes, and the one behind it.
    assert store.apply_retention().changes == ()
    clock.advance(DAY + 1)
    (change,) = store.apply_retention().changes
    assert (change.topic, change.partition, change.log_start_offset) == ("d", 0, 20)
    assert store.stats().files_by_state.get(s.FILE_RETIRED) == 3  # f2, f3, f4


def test_size_retention_keeps_at_least_retention_bytes(store: MetadataStore) -> None:
    store.create_topic("d", 1, {"retention.bytes": "250", "retention.ms": "-1"})
    for i in range(5):  # 100 bytes each (the helper's data_len)
        commit(store, f"f{i}", [chunk("d", 0, 3)])
    (change,) = store.apply_retention().changes
    assert (change.log_start_offset, change.segments, change.bytes) == (6, 2, 200)
    assert store.apply_retention().changes == ()
    assert sum(x.data_len for x in store.find_segments("d", 0, 6)) == 300


def test_unlimited_retention_and_compact_topics_are_untouched(store: MetadataStore,
                                                              clock: ManualClock) -> None:
    store.create_topic("forever", 1, {"retention.ms": "-1"})
    store.create_topic("c", 1, {"cleanup.policy": "compact", "retention.ms": "0"})
    commit(store, "f", [stamped("c", 0, 2, 1), stamped("forever", 0, 2, 1)])
    assert store.apply_retention().changes == ()
    # compact,delete: both apply.
    store.create_topic("cd", 1, {"cleanup.policy": "compact,delete", "retention.ms": "0"})
    commit(store, "g", [stamped("cd", 0, 2, clock.now_ms() - 1)])
    (change,) = store.apply_retention().changes
    assert (change.topic, change.log_start_offset) == ("cd", 2)


def test_leased_files_wait_and_stale_jobs_are_refused(store: MetadataStore,
                                                      clock: ManualClock) -> None:
    now = clock.now_ms()
    store.create_topic("d", 1, {"retention.ms": str(DAY)})
    commit(store, "f1", [stamped("d", 0, 5, now - 3 * DAY)])
    commit(store, "f2", [stamped("d", 0, 5, now - 3 * DAY)])
    ids = [f.id for f in store.snapshot().files]
    lease = store.lease_job("spec", [ids[1]], owner="w1", lease_ms=10_000)
    (change,) = store.apply_retention().changes  # f1 goes; f2 is held by the job
    assert (change.log_start_offset, change.segments) == (5, 1)
    # The lease expires: retention takes f2 and the late job's commit is refused.
    clock.advance(10_001)
    (change,) = store.apply_retention().changes
    assert change.log_start_offset == 10
    out = store.register_pending_file("out")
    seg = OutputSegment(topic="d", partition=0, base_offset=5, last_offset=9, record_count=5,
                        data_pos=0, data_len=50, hash_pos=0, hash_count=0, batch_count=1,
                        min_timestamp=1, max_timestamp=2, tombstone_count=0, frame_crc=7,
                        cleaned_at_ms=None)
    output = CompactionOutput(file_id=out, layout=layout(size=60, data_offset=0, data_length=50,
                                                         meta_offset=50, meta_length=10),
                              segments=(seg,))
    with pytest.raises(CommitConflictError, match="no longer live"):
        store.commit_compaction(lease, outputs=[output])
    assert store.partitions("d")[0].log_start_offset == 10
    assert store.find_segments("d", 0, 10) == []



def test_retention_cuts_the_prefix_a_model_predicts(store: MetadataStore,
                                                    clock: ManualClock) -> None:
    """Property: the prefix decided in the database is the one Kafka's rule gives: while
    the next segment is older than retention.ms, then while the log would still hold
    retention.bytes without it."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    names = iter(range(10_000))

    @settings(max_examples=40, deadline=None)
    @given(segs=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 300)), min_size=1,
                         max_size=7),
           ms=st.sampled_from([-1, DAY, 2 * DAY]), nbytes=st.sampled_from([-1, 0, 250, 600]))
    def check(segs: list[tuple[int, int]], ms: int, nbytes: int) -> None:
        topic = f"p{next(names)}"
        store.create_topic(topic, 1, {"retention.ms": str(ms), "retention.bytes": str(nbytes)})
        now = clock.now_ms()
        for i, (age_days, size) in enumerate(segs):
            commit(store, f"{topic}-{i}", [dataclasses.replace(
                stamped(topic, 0, 1, now - age_days * DAY + 1), data_len=size)])
        n = 0
        if ms >= 0:
            while n < len(segs) and segs[n][0] * DAY - 1 > ms:
                n += 1
        if nbytes >= 0:
            left = sum(size for _, size in segs[n:])
            while n < len(segs) and left - segs[n][1] >= nbytes:
                left -= segs[n][1]
                n += 1
        changes = [c for c in store.apply_retention().changes if c.topic == topic]
        assert [(c.log_start_offset, c.segments) for c in changes] == ([(n, n)] if n else [])

    check()
