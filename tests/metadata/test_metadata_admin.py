"""Admin changes on SQLite and PostgreSQL: delete a topic, add partitions, alter configs,
delete records; each one transaction, bad input commits nothing."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from clock import ManualClock
from metadata import CompactionOutput, MetadataStore, OutputSegment, engine, files, jobs
from metadata import schema as s
from metadata.errors import (
    CommitConflictError,
    InvalidConfigError,
    InvalidPartitionsError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    UnknownPartitionError,
    UnknownTopicError,
)
from metadata.models import Lease, ProducerBatch
from metadata.segments import insert_segments
from metadata.topicconfig import AlterOp, ConfigChange
from tests.layouts import layout
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
    return CompactionOutput(fid, layout(size=60, data_offset=0, data_length=50,
                                        meta_offset=50, meta_length=10), segments=(seg,))


# ---------------------------------------------------------------- delete topic


def test_delete_topic_retires_files_it_empties(store: MetadataStore, clock: ManualClock) -> None:
    store.create_topic("gone", 2)
    store.create_topic("kept", 1)
    commit(store, "only-gone", [chunk("gone", 0, 5), chunk("gone", 1, 3)])
    commit(store, "shared", [chunk("gone", 0, 2), chunk("kept", 0, 4)])
    fid = store.register_pending_file("idem")
    store.commit_produced(fid, layout([chunk("gone", 1, 1)], size=1000, data_offset=8,
                                      data_length=900, meta_offset=908, meta_length=92),
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
    # Named with the row it was resolved to (a Kafka topic id), the old incarnation is gone.
    assert len(store.partitions("t", again.id)) == 3
    with pytest.raises(UnknownTopicError):
        store.partitions("t", first.id)


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


def _commit_during_delete(store: MetadataStore, monkeypatch: pytest.MonkeyPatch,
                          module: Any, commit_fn: Callable[[], Any]) -> dict[str, Any]:
    """Run `commit_fn` until it holds its locks (paused where `module` inserts its
    segments), start delete_topic("t"), wait (PostgreSQL) until the delete waits for a
    lock, let the commit go on; each one's outcome ("commit", "delete": result or error)."""
    monkeypatch.setattr(engine, "COMMIT_ATTEMPTS", 1)  # the one interleaving decides
    locked, go = threading.Event(), threading.Event()

    def paused_insert(*args: Any) -> None:  # the commit holds its locks here
        locked.set()
        go.wait(60)
        insert_segments(*args)

    monkeypatch.setattr(module, "insert_segments", paused_insert)
    outcomes: dict[str, Any] = {}

    def run(name: str, fn: Callable[[], Any]) -> threading.Thread:
        def target() -> None:
            try:
                outcomes[name] = fn()
            except Exception as exc:
                outcomes[name] = exc
        th = threading.Thread(target=target)
        th.start()
        return th

    committer = run("commit", commit_fn)
    assert locked.wait(60)
    deleter = run("delete", lambda: store.delete_topic("t"))
    if store.dialect == "postgresql":  # (SQLite: the delete waits for the write lock)
        deadline = time.monotonic() + 60
        while not _waiting_on_a_lock(store):
            assert time.monotonic() < deadline, "the delete never waited for the commit"
            time.sleep(0.01)
    go.set()
    committer.join(60)
    deleter.join(60)
    return outcomes


def test_delete_topic_waits_for_a_commit_in_progress(store: MetadataStore,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent commit that locked a partition of the topic before delete_topic started
    finishes first; the delete then retires what it committed (PostgreSQL: the commit holds
    the topic row FOR SHARE; without it the delete removed the segments, waited for the
    partition row, then hit the new segment's foreign key)."""
    store.create_topic("t", 1)
    commit(store, "old", [chunk("t", 0, 5)])
    outcomes = _commit_during_delete(store, monkeypatch, files,
                                     lambda: commit(store, "new", [chunk("t", 0, 3)]))
    assert outcomes["commit"] == {("t", 0): 5}
    assert not isinstance(outcomes["delete"], Exception), outcomes["delete"]
    assert outcomes["delete"].name == "t"
    with pytest.raises(UnknownTopicError):
        store.get_topic("t")
    assert {store.get_file(i).object_key: store.get_file(i).state for i in (1, 2)} == {
        "old": s.FILE_RETIRED, "new": s.FILE_RETIRED}
    assert rows(store, s.segments) == 0


def test_delete_topic_waits_for_a_compaction_commit_in_progress(
        store: MetadataStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction commit that locked its inputs before delete_topic started finishes
    first; the delete then retires its output (the segments table has no foreign keys since
    schema v16: the commit's input-file and partition locks are what keep its output from
    being left behind the deleted partitions)."""
    lease = leased_two_files(store)
    out = output(store, "out", "t", 0, 9)
    outcomes = _commit_during_delete(store, monkeypatch, jobs,
                                     lambda: store.commit_compaction(lease, outputs=[out]))
    assert not isinstance(outcomes["commit"], Exception), outcomes["commit"]
    assert not isinstance(outcomes["delete"], Exception), outcomes["delete"]
    with pytest.raises(UnknownTopicError):
        store.get_topic("t")
    assert store.get_file(out.file_id).state == s.FILE_RETIRED
    assert rows(store, s.segments) == 0 and rows(store, s.partitions) == 0


def _waiting_on_a_lock(store: MetadataStore) -> bool:
    """Whether a session of this PostgreSQL database waits for a lock."""
    with store.read() as conn:
        return bool(conn.execute(sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'")).scalar())


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
    # The legacy AlterConfigs' full replacement: every override not set is gone.
    replaced = store.alter_topic_configs("t", [ConfigChange("segment.ms", AlterOp.SET, "9")],
                                         replace=True)
    assert dict(replaced.configs) == {"segment.ms": "9"} == dict(store.get_topic("t").configs)
    assert not replaced.config.compacted


def test_partition_producers_are_the_current_states(store: MetadataStore,
                                                    clock: ManualClock) -> None:
    """DescribeProducers' read: a partition's unexpired producer states, by id."""
    store.create_topic("t", 2)
    for pid in (7, 3):
        fid = store.register_pending_file(f"f{pid}")
        store.commit_produced(fid, layout([chunk("t", 0, 2)], size=1000, data_offset=8,
                                          data_length=900, meta_offset=908, meta_length=92),
                              batches={("t", 0): [ProducerBatch(pid, 1, 0, 1, 0)]})
    assert [(p.producer_id, p.epoch, p.batches[-1].last_seq)
            for p in store.partition_producers("t", 0)] == [(3, 1, 1), (7, 1, 1)]
    assert store.partition_producers("t", 1) == []
    clock.advance(store.config.producer_id_expiration_ms + 1)
    assert store.partition_producers("t", 0) == []
    with pytest.raises(UnknownTopicError):
        store.partition_producers("nope", 0)


@pytest.mark.parametrize("change", [
    ConfigChange("cleanup.policy", AlterOp.SET, "compact"),
    ConfigChange("cleanup.policy", AlterOp.APPEND, "compact"),
    ConfigChange("cleanup.policy", AlterOp.SET, "delete,compact"),
])
def test_compact_is_not_added_to_a_topic_holding_unhashed_records(
        store: MetadataStore, change: ConfigChange) -> None:
    """Records written under the delete policy carry no key hashes, and a merge holding
    them cannot deduplicate: such a topic is refused compaction while any is live."""
    store.create_topic("t", 2)
    commit(store, "plain", [dataclasses.replace(chunk("t", 1, 3), hash_count=0)])
    before = store.get_topic("t")
    for validate_only in (True, False):
        with pytest.raises(InvalidConfigError, match=r"'compact'.*cleanup\.policy of topic 't'"):
            store.alter_topic_configs("t", [change], validate_only=validate_only)
    assert store.get_topic("t") == before
    assert store.alter_topic_configs("t", [  # other changes go through
        ConfigChange("retention.ms", AlterOp.SET, "5")]).config.retention_ms == 5
    store.create_topic("empty", 1)
    assert store.alter_topic_configs("empty", [change]).config.compacted
    # Once no unhashed record is live (retention, DeleteRecords), compaction may start.
    assert store.delete_records({("t", 1): -1}) == {("t", 1): 3}
    assert store.alter_topic_configs("t", [change]).config.compacted


def test_a_compacted_topic_may_go_back_to_compaction(store: MetadataStore) -> None:
    """Key hashes stay with a compacted topic's records: compact -> delete -> compact is
    allowed while every live record has its hash."""
    store.create_topic("k", 1, {"cleanup.policy": "compact"})
    commit(store, "keyed", [chunk("k", 0, 4)])  # hash_count == record_count
    store.alter_topic_configs("k", [ConfigChange("cleanup.policy", AlterOp.SET, "delete")])
    assert store.alter_topic_configs("k", [
        ConfigChange("cleanup.policy", AlterOp.APPEND, "compact")]).config.compacted


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


def test_delete_records_needs_the_delete_policy(store: MetadataStore) -> None:
    """As Kafka: a topic whose cleanup.policy lacks `delete` keeps its records
    (PolicyViolationError, that partition unchanged); compact,delete allows it."""
    store.create_topic("c", 1, {"cleanup.policy": "compact"})
    store.create_topic("cd", 1, {"cleanup.policy": "compact,delete"})
    commit(store, "a", [chunk("c", 0, 5), chunk("cd", 0, 5)])
    got = store.delete_records({("c", 0): 3, ("cd", 0): 3})
    assert isinstance(got[("c", 0)], PolicyViolationError)
    assert "policy" in str(got[("c", 0)])
    assert got[("cd", 0)] == 3
    assert [p.log_start_offset for t in ("c", "cd") for p in store.partitions(t)] == [0, 3]
    assert len(store.find_segments("c", 0, 0)) == 1


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
