"""Admin changes on SQLite and PostgreSQL: delete a topic, add partitions, alter configs,
delete records; each one transaction, bad input commits nothing."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa

from clock import ManualClock
from metadata import CompactionOutput, MetadataStore, OutputSegment
from metadata import schema as s
from metadata.errors import (
    CommitConflictError,
    InvalidConfigError,
    InvalidPartitionsError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from metadata.models import Lease, ProducerBatch
from metadata.topicconfig import AlterOp, ConfigChange
from tests.metadata.metadata_helpers import chunk, commit, lose_next_commit


def rows(store: MetadataStore, table: sa.Table) -> int:
    with store.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def output(store: MetadataStore, key: str, topic: str, base: int, last: int) -> CompactionOutput:
    fid = store.register_pending_file(key, level=1, holds_compacted=True)
    seg = OutputSegment(topic=topic, partition=0, base_offset=base, last_offset=last,
                        record_count=last - base + 1, data_pos=0, data_len=50, hash_pos=0,
                        hash_count=0, batch_count=1, min_timestamp=1, max_timestamp=2,
                        tombstone_count=0, frame_crc=0, cleaned_at_ms=None)
    return CompactionOutput(fid, size=60, data_offset=0, data_length=50, meta_offset=50,
                            meta_length=10, segments=(seg,))


# ---------------------------------------------------------------- delete topic


def test_delete_topic_retires_files_it_empties(store: MetadataStore, clock: ManualClock) -> None:
    store.create_topic("gone", 2)
    store.create_topic("kept", 1)
    commit(store, "only-gone", [chunk("gone", 0, 5), chunk("gone", 1, 3)])
    commit(store, "shared", [chunk("gone", 0, 2), chunk("kept", 0, 4)])
    fid = store.register_pending_file("idem")
    store.commit_produced(fid, size=1000, data_offset=8, data_length=900, meta_offset=908,
                          meta_length=92, chunks=[chunk("gone", 1, 1)],
                          batches={("gone", 1): [ProducerBatch(7, 0, 0, 0, 0)]})
    assert store.producer_state(7, "gone", 1) is not None
    before = store.get_topic("gone")

    assert store.delete_topic("gone") == before
    with pytest.raises(UnknownTopicError):
        store.get_topic("gone")
    with pytest.raises(UnknownTopicError):
        store.partitions("gone")
    assert [t.name for t in store.list_topics()] == ["kept"]
    assert rows(store, s.producer_state) == 0
    states = {f.object_key: f.state for f in (store.get_file(i) for i in range(1, 4))}
    assert states == {"only-gone": s.FILE_RETIRED, "shared": s.FILE_LIVE,
                      "idem": s.FILE_RETIRED}
    assert [f.object_key for f in store.files_to_gc(clock.now_ms())] == ["only-gone", "idem"]
    assert [x.base_offset for x in store.find_segments("kept", 0, 0)] == [0]
    with pytest.raises(UnknownTopicError):
        store.delete_topic("gone")


def test_a_topic_created_again_is_a_new_topic(store: MetadataStore) -> None:
    first = store.create_topic("t", 1)
    commit(store, "f", [chunk("t", 0, 5)])
    store.delete_topic("t")  # the highest id: SQLite would reuse a rowid
    again = store.create_topic("t", 3)
    assert again.id > first.id
    assert [(p.log_start_offset, p.next_offset) for p in store.partitions("t")] == [(0, 0)] * 3
    assert store.find_segments("t", 0, 0) == []


def leased_two_files(store: MetadataStore) -> Lease:
    """Topic t with two files of 5 records on partition 0, both leased by one compaction."""
    store.create_topic("t", 1)
    commit(store, "a", [chunk("t", 0, 5)])
    commit(store, "b", [chunk("t", 0, 5)])
    ids = [f.id for f in store.snapshot().files]
    return store.lease_job("spec", ids, owner="w", lease_ms=60_000)


def test_a_compaction_of_a_deleted_topic_does_not_resurrect_it(store: MetadataStore) -> None:
    lease = leased_two_files(store)
    out = output(store, "out", "t", 0, 9)
    store.delete_topic("t")
    store.create_topic("t", 1)  # same name, new topic: the job's outputs must not land here
    with pytest.raises(CommitConflictError):
        store.commit_compaction(lease, outputs=[out])
    assert store.find_segments("t", 0, 0) == []
    assert store.partitions("t")[0].next_offset == 0
    assert store.get_file(out.file_id).state == s.FILE_PENDING  # GC takes it


def test_delete_topic_lost_commit_reply_is_read_back(store: MetadataStore,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    info = store.create_topic("t", 1)
    lose_next_commit(monkeypatch, applied=True)
    assert store.delete_topic("t") == info
    with pytest.raises(UnknownTopicError):
        store.get_topic("t")


# ---------------------------------------------------------------- partitions and configs


def test_add_partitions_only_grows(store: MetadataStore) -> None:
    store.create_topic("t", 2)
    commit(store, "f", [chunk("t", 1, 4)])
    assert store.add_partitions("t", 4, validate_only=True).partitions == 4
    assert store.get_topic("t").partitions == 2
    assert store.add_partitions("t", 4).partitions == 4
    assert [(p.partition, p.next_offset) for p in store.partitions("t")] == [
        (0, 0), (1, 4), (2, 0), (3, 0)]
    commit(store, "g", [chunk("t", 3, 2)])
    for bad in (4, 3, 0):
        with pytest.raises(InvalidPartitionsError):
            store.add_partitions("t", bad)
    with pytest.raises(UnknownTopicError):
        store.add_partitions("nope", 5)
    assert store.get_topic("t").partitions == 4


def test_alter_configs_as_kafka(store: MetadataStore) -> None:
    store.create_topic("t", 1, {"retention.ms": "1000"})
    changed = store.alter_topic_configs("t", [
        ConfigChange("cleanup.policy", AlterOp.APPEND, "compact"),
        ConfigChange("retention.ms", AlterOp.DELETE),
        ConfigChange("max.message.bytes", AlterOp.SET, " 2048 "),
    ])
    assert dict(changed.configs) == {"cleanup.policy": "compact,delete",
                                     "max.message.bytes": "2048"}
    assert store.get_topic("t") == changed
    assert changed.config.compacted and changed.config.retention_ms == 604_800_000
    after = store.alter_topic_configs("t", [
        ConfigChange("cleanup.policy", AlterOp.SUBTRACT, "delete")])
    assert after.configs["cleanup.policy"] == "compact" and not after.config.deletes
    dry = store.alter_topic_configs("t", [ConfigChange("retention.ms", AlterOp.SET, "5")],
                                    validate_only=True)
    assert dry.config.retention_ms == 5 and store.get_topic("t") == after


@pytest.mark.parametrize("change", [
    ConfigChange("retention.ms", AlterOp.SET, "soon"),
    ConfigChange("no.such.config", AlterOp.SET, "1"),
    ConfigChange("retention.ms", AlterOp.APPEND, "1"),
    ConfigChange("cleanup.policy", AlterOp.SUBTRACT, "delete"),  # leaves an empty policy
    ConfigChange("cleanup.policy", AlterOp.SET, None),
    ConfigChange("min.compaction.lag.ms", AlterOp.SET, "10"),  # above max.compaction.lag.ms
])
def test_bad_config_changes_commit_nothing(store: MetadataStore, change: ConfigChange) -> None:
    store.create_topic("t", 1, {"max.compaction.lag.ms": "5"})
    before = store.get_topic("t")
    with pytest.raises(InvalidConfigError):
        store.alter_topic_configs("t", [ConfigChange("segment.bytes", AlterOp.SET, "100"),
                                        change])
    assert store.get_topic("t") == before


# ---------------------------------------------------------------- delete records


def test_delete_records_moves_the_log_start(store: MetadataStore, clock: ManualClock) -> None:
    store.create_topic("t", 2)
    commit(store, "a", [chunk("t", 0, 5), chunk("t", 1, 5)])
    commit(store, "b", [chunk("t", 0, 5)])
    commit(store, "c", [chunk("t", 0, 5)])
    got = store.delete_records({("t", 0): 12, ("t", 1): -1, ("t", 2): 0, ("x", 0): 0})
    assert got[("t", 0)] == 12 and got[("t", 1)] == 5
    assert isinstance(got[("t", 2)], UnknownPartitionError)
    assert isinstance(got[("x", 0)], UnknownTopicError)
    parts = store.partitions("t")
    assert [(p.log_start_offset, p.clean_offset) for p in parts] == [(12, 12), (5, 5)]
    # Wholly below: a's and b's segments go (a retires, its last segment gone); c stays.
    assert [x.base_offset for x in store.find_segments("t", 0, 12)] == [10]
    with pytest.raises(OffsetOutOfRangeError):
        store.find_segments("t", 0, 11)
    assert [f.object_key for f in store.files_to_gc(clock.now_ms())] == ["a", "b"]
    # At or below the log start: nothing changes, the answer is the log start.
    assert store.delete_records({("t", 0): 3}) == {("t", 0): 12}


def test_delete_records_past_the_high_watermark_commits_nothing(store: MetadataStore) -> None:
    store.create_topic("t", 1)
    commit(store, "a", [chunk("t", 0, 5)])
    for bad in (6, -2):
        got = store.delete_records({("t", 0): bad})
        assert isinstance(got[("t", 0)], OffsetOutOfRangeError)
    assert store.partitions("t")[0].log_start_offset == 0
    assert len(store.find_segments("t", 0, 0)) == 1


def test_delete_records_refuses_a_compaction_of_what_it_dropped(store: MetadataStore) -> None:
    lease = leased_two_files(store)
    assert store.delete_records({("t", 0): 5}) == {("t", 0): 5}
    with pytest.raises(CommitConflictError):
        store.commit_compaction(lease, outputs=[output(store, "out", "t", 0, 9)])
    assert [x.base_offset for x in store.find_segments("t", 0, 5)] == [5]


def test_delete_records_lost_commit_reply_is_read_back(store: MetadataStore,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_topic("t", 1)
    commit(store, "a", [chunk("t", 0, 5)])
    armed = lose_next_commit(monkeypatch, applied=True)
    assert store.delete_records({("t", 0): 5}) == {("t", 0): 5}
    assert not armed["on"]
    assert store.partitions("t")[0].log_start_offset == 5


def test_retention_still_goes_through_the_shared_path(store: MetadataStore,
                                                      clock: ManualClock) -> None:
    store.create_topic("t", 1, {"retention.ms": "10"})
    commit(store, "a", [dataclasses.replace(chunk("t", 0, 5), max_timestamp=0)])
    clock.advance(1000)
    result = store.apply_retention()
    assert result.changes[0].log_start_offset == 5
    assert store.partitions("t")[0].clean_offset == 5
