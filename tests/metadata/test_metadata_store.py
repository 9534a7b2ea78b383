"""MetadataStore behaviour on every backend (SQLite and PostgreSQL via `metadata_url`)."""

from __future__ import annotations

import itertools
import re

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from clock import ManualClock
from fileformat import ObjectLayout
from metadata import MetadataStore
from metadata.errors import (
    CommitConflictError,
    FileStateError,
    InvalidCommitError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    ObjectKeyExistsError,
    OffsetOutOfRangeError,
    TopicExistsError,
    UnknownFileError,
    UnknownPartitionError,
    UnknownTopicError,
    UnsupportedMetadataUrlError,
)
from metadata.schema import LATEST_VERSION
from tests.layouts import layout
from tests.metadata.metadata_helpers import chunk, commit, lose_next_commit

# ------------------------------------------------------------------ open / schema


def test_open_is_idempotent_and_keeps_secret(metadata_url: str) -> None:
    first = MetadataStore.open(metadata_url, create=True)
    secret = first.cluster_secret()
    first.create_topic("t", 2)
    first.close()
    second = MetadataStore.open(metadata_url, create=True)
    assert second.schema_version() == LATEST_VERSION
    assert second.cluster_secret() == secret and len(secret) == 32
    assert [t.name for t in second.list_topics()] == ["t"]
    with second.engine.connect() as conn:
        versions = conn.execute(
            sa.text("SELECT version FROM schema_version ORDER BY version")).scalars().all()
    assert versions == list(range(1, LATEST_VERSION + 1))
    second.close()


def test_migrations_build_the_current_schema(store: MetadataStore) -> None:
    """The migrated database has exactly the columns of the current tables: a field added to
    models.Segment (the segments table derives from it) needs a migration adding its column."""
    from metadata import schema

    inspector = sa.inspect(store.engine)
    for table in (schema.topics, schema.partitions, schema.files, schema.segments, schema.jobs):
        stored = {c["name"] for c in inspector.get_columns(table.name)}
        assert stored == {c.name for c in table.c}, table.name


def test_star_import_and_segment_forms_share_one_definition() -> None:
    import dataclasses

    import metadata

    namespace: dict[str, object] = {}
    exec("from metadata import *", namespace)  # every name in __all__ exists
    assert set(metadata.__all__) <= set(namespace)
    shared = [f.name for f in dataclasses.fields(metadata.Segment)]
    for form in (metadata.ChunkMeta, metadata.OutputSegment, metadata.SegmentInfo):
        assert [f.name for f in dataclasses.fields(form)][:len(shared)] == shared


def test_concurrent_opens_migrate_once(metadata_url: str) -> None:
    import threading

    stores: list[MetadataStore] = []
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            stores.append(MetadataStore.open(metadata_url, create=True))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len({s.cluster_secret() for s in stores}) == 1
    for s in stores:
        s.close()


def test_postgresql_url_is_mapped_and_bad_urls_rejected() -> None:
    from metadata.engine import engine_url

    assert engine_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    with pytest.raises(UnsupportedMetadataUrlError):
        MetadataStore.open("mysql://x/y", create=True)
    with pytest.raises(UnsupportedMetadataUrlError):
        MetadataStore.open("sqlite:///:memory:", create=True)


def test_sqlite_creates_parent_directory_and_uses_wal(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/deep/er/md.db"
    md = MetadataStore.open(url, create=True)
    with md.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    md.close()


# ------------------------------------------------------------------ topics


def test_create_get_list_topics(store: MetadataStore, clock: ManualClock) -> None:
    info = store.create_topic("events", 3)
    assert (info.name, info.partitions, dict(info.configs)) == ("events", 3, {})
    assert info.created_at_ms == clock.now_ms()
    store.create_topic("state", 2, {"cleanup.policy": "compact", "retention.ms": "-1"})
    got = store.get_topic("state")
    assert got.config.compacted and not got.config.deletes and got.config.retention_ms == -1
    assert dict(got.configs) == {"cleanup.policy": "compact", "retention.ms": "-1"}
    assert store.get_topic("events") == info
    assert [t.name for t in store.list_topics()] == ["events", "state"]
    parts = store.partitions("events")
    assert [(p.partition, p.log_start_offset, p.next_offset) for p in parts] == [
        (0, 0, 0), (1, 0, 0), (2, 0, 0)]


def test_duplicate_topic(store: MetadataStore) -> None:
    store.create_topic("t", 1)
    with pytest.raises(TopicExistsError, match="'t'"):
        store.create_topic("t", 5)
    assert store.get_topic("t").partitions == 1


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "x" * 250, "é", "a/b"])
def test_invalid_topic_names(store: MetadataStore, name: str) -> None:
    with pytest.raises(InvalidTopicError):
        store.create_topic(name, 1)


@pytest.mark.parametrize("count", [0, -1])
def test_invalid_partition_counts(store: MetadataStore, count: int) -> None:
    with pytest.raises(InvalidPartitionsError):
        store.create_topic("t", count)


def test_bad_config_creates_nothing(store: MetadataStore) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape("configuration cleanup.policy:")):
        store.create_topic("t", 1, {"cleanup.policy": "nope"})
    with pytest.raises(InvalidConfigError, match="'foo'"):
        store.create_topic("t", 1, {"foo": "1"})
    assert store.list_topics() == []


def test_unknown_topic(store: MetadataStore) -> None:
    with pytest.raises(UnknownTopicError):
        store.get_topic("nope")
    with pytest.raises(UnknownTopicError):
        store.partitions("nope")
    with pytest.raises(UnknownTopicError):
        store.find_segments("nope", 0, 0)


# ------------------------------------------------------------------ commits


def test_commit_assigns_contiguous_offsets(store: MetadataStore) -> None:
    store.create_topic("a", 2)
    store.create_topic("b", 1)
    assert commit(store, "k1", [chunk("a", 0, 5), chunk("b", 0, 3)]) == {("a", 0): 0, ("b", 0): 0}
    assert commit(store, "k2", [chunk("a", 0, 2), chunk("a", 1, 4)]) == {("a", 0): 5, ("a", 1): 0}
    assert commit(store, "k3", [chunk("b", 0, 1), chunk("a", 0, 7)]) == {("b", 0): 3, ("a", 0): 7}
    assert [p.next_offset for p in store.partitions("a")] == [14, 4]
    assert [p.next_offset for p in store.partitions("b")] == [4]
    segs = store.find_segments("a", 0, 0)
    assert [(s.base_offset, s.last_offset, s.object_key) for s in segs] == [
        (0, 4, "k1"), (5, 6, "k2"), (7, 13, "k3")]


def test_commit_records_layout_and_flips_file_live(
        store: MetadataStore, clock: ManualClock) -> None:
    store.create_topic("t", 1)
    fid = store.register_pending_file("obj", level=0, holds_compacted=True)
    pending = store.get_file(fid)
    assert (pending.state, pending.size, pending.holds_compacted) == ("pending", None, True)
    clock.advance(10)
    c = chunk("t", 0, 4, records=3)
    store.commit_file(fid, layout([c], size=123, data_offset=8, data_length=100,
                                  meta_offset=108, meta_length=15))
    f = store.get_file(fid)
    assert (f.state, f.size, f.layout) == ("live", 123, ObjectLayout(
        data_offset=8, data_length=100, meta_offset=108, meta_length=15, size=123))
    assert f.state_changed_at_ms == f.created_at_ms + 10
    (seg,) = store.find_segments("t", 0, 0)
    assert (seg.record_count, seg.offset_span, seg.file_size, seg.file_id) == (3, 4, 123, fid)
    assert (seg.data_pos, seg.data_len, seg.hash_pos, seg.hash_count, seg.batch_count) == (
        c.data_pos, c.data_len, c.hash_pos, c.hash_count, c.batch_count)
    assert (seg.min_timestamp, seg.max_timestamp, seg.tombstone_count) == (1, 2, 0)
    assert seg.live and seg.cleaned_at_ms is None and seg.created_at_ms == clock.now_ms()


def test_commit_with_unknown_topic_commits_nothing(store: MetadataStore) -> None:
    store.create_topic("t", 2)
    fid = store.register_pending_file("k")
    with pytest.raises(UnknownTopicError, match="'ghost'"):
        store.commit_file(fid, layout([chunk("t", 0, 5), chunk("ghost", 0, 1)]))
    with pytest.raises(UnknownPartitionError, match="partition 2"):
        store.commit_file(fid, layout([chunk("t", 1, 5), chunk("t", 2, 1)]))
    assert [p.next_offset for p in store.partitions("t")] == [0, 0]
    assert store.find_segments("t", 0, 0) == []
    assert store.get_file(fid).state == "pending"
    # The same file can still be committed once the chunks are right.
    assert commit_existing(store, fid, [chunk("t", 1, 2)]) == {("t", 1): 0}


def commit_existing(store: MetadataStore, fid: int, chunks: list) -> dict:  # type: ignore[type-arg]
    return store.commit_file(fid, layout(chunks))


def test_commit_requires_pending_file(store: MetadataStore) -> None:
    store.create_topic("t", 1)
    fid = store.register_pending_file("k")
    commit_existing(store, fid, [chunk("t", 0)])
    with pytest.raises(FileStateError, match="live"):
        commit_existing(store, fid, [chunk("t", 0)])
    fid2 = store.register_pending_file("k2")
    store.abandon_file(fid2)
    with pytest.raises(FileStateError, match="abandoned"):
        commit_existing(store, fid2, [chunk("t", 0)])
    with pytest.raises(UnknownFileError):
        commit_existing(store, 999_999, [chunk("t", 0)])
    assert store.partitions("t")[0].next_offset == 1


@pytest.mark.parametrize("chunks", [
    [], [chunk("t", 0), chunk("t", 0)], [chunk("t", 0, span=0)], [chunk("t", 0, 2, records=3)],
])
def test_malformed_chunks_rejected(store: MetadataStore, chunks: list) -> None:  # type: ignore[type-arg]
    store.create_topic("t", 1)
    fid = store.register_pending_file("k")
    with pytest.raises(InvalidCommitError):
        commit_existing(store, fid, chunks)
    assert store.get_file(fid).state == "pending"


def test_duplicate_object_key_rejected(store: MetadataStore) -> None:
    store.register_pending_file("k")
    with pytest.raises(ObjectKeyExistsError, match="'k'"):
        store.register_pending_file("k")


def test_failed_commit_before_commit_is_retried(store: MetadataStore,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A database error inside the transaction rolls back and the commit is retried."""
    store.create_topic("t", 1)
    fid = store.register_pending_file("k")
    calls = {"n": 0}

    def flaky(conn: sa.Connection, cursor: object, stmt: str, *args: object) -> None:
        if stmt.startswith("INSERT INTO segments") and calls["n"] < 1:
            calls["n"] += 1
            raise sa.exc.OperationalError(stmt, None, RuntimeError("injected"))

    sa.event.listen(store.engine, "before_cursor_execute", flaky)
    try:
        assert commit_existing(store, fid, [chunk("t", 0, 3)]) == {("t", 0): 0}
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", flaky)
    assert calls["n"] == 1
    assert store.partitions("t")[0].next_offset == 3
    assert len(store.find_segments("t", 0, 0)) == 1


def test_persistent_failure_is_a_conflict(store: MetadataStore) -> None:
    store.create_topic("t", 1)
    fid = store.register_pending_file("k")

    def broken(conn: sa.Connection, cursor: object, stmt: str, *args: object) -> None:
        if stmt.startswith("INSERT INTO segments"):
            raise sa.exc.OperationalError(stmt, None, RuntimeError("injected"))

    sa.event.listen(store.engine, "before_cursor_execute", broken)
    try:
        with pytest.raises(CommitConflictError) as err:
            commit_existing(store, fid, [chunk("t", 0, 3)])
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", broken)
    assert err.value.retriable
    assert store.get_file(fid).state == "pending"
    assert store.partitions("t")[0].next_offset == 0


@pytest.mark.parametrize("applied", [True, False])
def test_failed_commit_statement_is_resolved_by_reading_back(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch, applied: bool
) -> None:
    """COMMIT's result is lost: the file's state says whether it was applied. Applied → the
    bases are returned without committing twice; not applied → the commit is retried."""
    store.create_topic("t", 1)
    commit(store, "first", [chunk("t", 0, 2)])
    fid = store.register_pending_file("k")
    armed = lose_next_commit(monkeypatch, applied)
    assert commit_existing(store, fid, [chunk("t", 0, 3)]) == {("t", 0): 2}
    assert not armed["on"]
    assert store.partitions("t")[0].next_offset == 5  # applied exactly once
    assert len(store.find_segments("t", 0, 0)) == 2


# ------------------------------------------------------------------ reads


def test_find_segments_semantics(store: MetadataStore) -> None:
    store.create_topic("t", 2)
    for i, span in enumerate([3, 1, 4, 2]):  # segments [0,2] [3,3] [4,7] [8,9]
        commit(store, f"k{i}", [chunk("t", 0, span)])

    def bases(offset: int, limit: int | None = None) -> list[int]:
        return [s.base_offset for s in store.find_segments("t", 0, offset, limit=limit)]

    assert bases(0) == [0, 3, 4, 8]
    assert bases(2) == [0, 3, 4, 8]  # the segment containing offset 2 is included
    assert bases(3) == [3, 4, 8]
    assert bases(5) == [4, 8]
    assert bases(9) == [8]
    assert bases(10) == [] and bases(1000) == []  # at / past the end: nothing yet
    assert bases(0, limit=2) == [0, 3]
    assert bases(5, limit=1) == [4]
    assert store.find_segments("t", 1, 0) == []
    with pytest.raises(OffsetOutOfRangeError, match="below log start 0"):
        store.find_segments("t", 0, -1)
    with pytest.raises(UnknownPartitionError):
        store.find_segments("t", 2, 0)


def test_partitions_from_answers_as_partitions_and_find_segments_in_one_statement(
        store: MetadataStore) -> None:
    store.create_topic("t", 4)
    store.create_topic("u", 1)
    for i, span in enumerate([3, 1, 4, 2]):
        commit(store, f"k{i}", [chunk("t", 0, span), chunk("t", 1, 1), chunk("t", 2, 2)])
    commit(store, "u", [chunk("u", 0, 5)])
    store.delete_records({("t", 2): 4})  # partition 2's log starts at 4 (segment [4,5])
    # t/1 twice: its last offset counts; t/3 and u/0 caught up (at their high watermark).
    wanted = [("t", 0, 2), ("t", 1, 0), ("t", 1, 3), ("t", 2, 1), ("t", 3, 0), ("u", 0, 5)]
    statements: list[str] = []

    def capture(conn: sa.Connection, cursor: object, stmt: str, *args: object) -> None:
        statements.append(stmt)

    sa.event.listen(store.engine, "before_cursor_execute", capture)
    try:
        found = store.partitions_from(wanted, limit=2)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", capture)
    assert len(statements) == 1  # no BEGIN nor COMMIT either: one statement, its own snapshot
    assert set(found) == {("t", 0), ("t", 1), ("t", 2), ("t", 3), ("u", 0)}
    infos = {(p.topic, p.partition): p for name in ("t", "u") for p in store.partitions(name)}
    rows = {"t": store.get_topic("t").id, "u": store.get_topic("u").id}
    for key, got in found.items():
        assert (got.topic_id, got.info) == (rows[key[0]], infos[key])
    for topic, partition, offset in [("t", 0, 2), ("t", 1, 3), ("t", 3, 0), ("u", 0, 5)]:
        assert found[(topic, partition)].segments == store.find_segments(
            topic, partition, offset, limit=2)
    assert [s.base_offset for s in found[("t", 0)].segments] == [0, 3]  # type: ignore[union-attr]
    assert found[("t", 3)].segments == found[("u", 0)].segments == []
    assert isinstance(found[("t", 2)].segments, OffsetOutOfRangeError)
    with pytest.raises(OffsetOutOfRangeError):
        store.find_segments("t", 2, 1)
    # No such topic, no such partition: left out.
    assert store.partitions_from([("gone", 0, 0), ("t", 9, 0)], limit=2) == {}
    # More partitions than one statement's arms: every one answered, each once.
    store.create_topic("wide", 150)
    commit(store, "wide", [chunk("wide", q, 1) for q in range(150)])
    wide = store.partitions_from([("wide", q, 0) for q in range(150)] * 2, limit=1)
    assert sorted(wide) == [("wide", q) for q in range(150)]
    assert all(isinstance(v.segments, list) and len(v.segments) == 1 for v in wide.values())


def test_partition_offsets_are_partitions_rows_in_one_statement(store: MetadataStore) -> None:
    store.create_topic("t", 3)
    store.create_topic("u", 2)
    commit(store, "k", [chunk("t", 0, 3), chunk("t", 2, 1), chunk("u", 1, 2)])
    store.delete_records({("t", 0): 2})
    statements: list[str] = []

    def capture(conn: sa.Connection, cursor: object, stmt: str, *args: object) -> None:
        statements.append(stmt)

    sa.event.listen(store.engine, "before_cursor_execute", capture)
    try:  # partitions 0 and 2 of t, u and a topic that does not exist
        found = store.partition_offsets({"t", "u", "gone"}, {0, 2})
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", capture)
    assert len(statements) == 1  # no BEGIN nor COMMIT either
    infos = {(p.topic, p.partition): p for name in ("t", "u") for p in store.partitions(name)}
    rows = {"t": store.get_topic("t").id, "u": store.get_topic("u").id}
    assert found == {k: (rows[k[0]], infos[k]) for k in [("t", 0), ("t", 2), ("u", 0)]}
    assert found[("t", 0)][1].log_start_offset == 2


def test_find_segments_is_one_query_on_the_live_index(store: MetadataStore) -> None:
    store.create_topic("t", 2)
    for i in range(5):
        commit(store, f"k{i}", [chunk("t", 0, 2), chunk("t", 1, 1)])
    statements: list[tuple[str, object]] = []

    def capture(conn: sa.Connection, cursor: object, stmt: str, params: object,
                *args: object) -> None:
        if not stmt.startswith(("BEGIN", "COMMIT", "ROLLBACK", "select pg_catalog")):
            statements.append((stmt, params))

    sa.event.listen(store.engine, "before_cursor_execute", capture)
    try:
        assert len(store.find_segments("t", 0, 3, limit=2)) == 2
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", capture)
    assert len(statements) == 1
    stmt, params = statements[0]
    with store.engine.connect() as conn:
        if store.dialect == "sqlite":
            plan = " ".join(r[-1] for r in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + stmt, params).all())  # type: ignore[arg-type]
        else:  # tiny tables: forbid seq scans to check that the partial index is usable
            conn.exec_driver_sql("SET enable_seqscan = off")
            plan = " ".join(r[0] for r in conn.exec_driver_sql(
                "EXPLAIN " + stmt, params).all())  # type: ignore[arg-type]
    assert "segments_live_by_offset" in plan, plan
    assert "SCAN segments" not in plan and "Seq Scan on segments" not in plan, plan


def test_find_segments_respects_log_start_and_liveness(store: MetadataStore) -> None:
    store.create_topic("t", 1)
    for i in range(3):
        commit(store, f"k{i}", [chunk("t", 0, 5)])
    # What retention/compaction (next issue) will do: move log start, retire a segment.
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE partitions SET log_start_offset = 5"))
        conn.execute(sa.text("UPDATE segments SET live = :f WHERE base_offset = 0"),
                     {"f": False})
    with pytest.raises(OffsetOutOfRangeError):
        store.find_segments("t", 0, 4)
    assert [s.base_offset for s in store.find_segments("t", 0, 5)] == [5, 10]
    assert store.partitions("t")[0].log_start_offset == 5


# ------------------------------------------------------------------ files and GC


def test_pending_abandon_and_gc(store: MetadataStore, clock: ManualClock) -> None:
    store.create_topic("t", 1)
    old_pending = store.register_pending_file("old-pending")
    abandoned = store.register_pending_file("abandoned")
    clock.advance(1000)
    store.abandon_file(abandoned)
    store.abandon_file(abandoned)  # idempotent
    live = store.register_pending_file("live")
    commit_existing(store, live, [chunk("t", 0)])
    with pytest.raises(FileStateError):
        store.abandon_file(live)
    clock.advance(1000)
    new_pending = store.register_pending_file("new-pending")

    def gc(cutoff: int) -> list[tuple[str, str]]:
        return [(f.object_key, f.state) for f in store.files_to_gc(cutoff)]

    start = clock.now_ms() - 2000  # when old-pending was registered; the cutoff is inclusive
    assert gc(start - 1) == []
    assert gc(start) == [("old-pending", "pending")]
    assert gc(start + 1000) == [("old-pending", "pending"), ("abandoned", "abandoned")]
    assert gc(clock.now_ms()) == [
        ("old-pending", "pending"), ("abandoned", "abandoned"), ("new-pending", "pending")]

    # GC protocol: mark deleting (fences late commits), delete objects, mark deleted.
    clock.advance(10)
    assert store.mark_deleting([old_pending, abandoned, live]) == [old_pending, abandoned]
    with pytest.raises(FileStateError, match="deleting"):
        commit_existing(store, old_pending, [chunk("t", 0)])
    store.abandon_file(old_pending)  # no-op on a deleting file
    assert [f.state for f in store.files_to_gc(clock.now_ms() + 1)] == [
        "deleting", "deleting", "pending"]
    assert store.mark_deleted([old_pending, abandoned, live]) == [old_pending, abandoned]
    assert [f.object_key for f in store.files_to_gc(clock.now_ms() + 1)] == ["new-pending"]
    assert store.get_file(live).state == "live"
    assert store.get_file(new_pending).state == "pending"
    assert store.mark_deleted([]) == []
    with pytest.raises(UnknownFileError):
        store.abandon_file(123_456)


def test_stats_and_snapshot(store: MetadataStore, clock: ManualClock) -> None:
    store.create_topic("a", 2)
    store.create_topic("b", 1, {"cleanup.policy": "compact"})
    commit(store, "k1", [chunk("a", 0, 2), chunk("b", 0, 1)])
    commit(store, "k2", [chunk("a", 1, 3)])
    store.abandon_file(store.register_pending_file("dead"))
    st = store.stats()
    assert st.topics == 2
    assert [(lv.level, lv.files, lv.bytes, lv.segments) for lv in st.levels] == [(0, 2, 2000, 3)]
    assert dict(st.files_by_state) == {"live": 2, "abandoned": 1}
    assert st.as_dict()["levels"] == [{"level": 0, "files": 2, "bytes": 2000, "segments": 3}]

    snap = store.snapshot()
    assert snap.taken_at_ms == clock.now_ms()
    assert [t.name for t in snap.topics] == ["a", "b"]
    assert [(p.topic, p.partition, p.next_offset) for p in snap.partitions] == [
        ("a", 0, 2), ("a", 1, 3), ("b", 0, 1)]
    assert [f.object_key for f in snap.files] == ["k1", "k2"]
    assert [(s.topic, s.partition, s.base_offset, s.object_key) for s in snap.segments] == [
        ("a", 0, 0, "k1"), ("a", 1, 0, "k2"), ("b", 0, 0, "k1")]


def test_find_segments_matches_a_model(metadata_url: str) -> None:
    """Property: for any commit sequence, find_segments equals the obvious list filter."""
    store = MetadataStore.open(metadata_url, create=True)
    counter = itertools.count()

    @settings(max_examples=40, deadline=None)
    @given(
        spans=st.lists(st.integers(1, 20), max_size=10),
        start=st.integers(-3, 220),
        limit=st.none() | st.integers(1, 4),
    )
    def check(spans: list[int], start: int, limit: int | None) -> None:
        n = next(counter)
        name = f"m{n}"
        store.create_topic(name, 1)
        model: list[tuple[int, int]] = []
        pos = 0
        for i, span in enumerate(spans):
            assert commit(store, f"m{n}-{i}", [chunk(name, 0, span)]) == {(name, 0): pos}
            model.append((pos, pos + span - 1))
            pos += span
        if start < 0:
            with pytest.raises(OffsetOutOfRangeError):
                store.find_segments(name, 0, start, limit=limit)
            return
        want = [seg for seg in model if seg[1] >= start][:limit]
        got = store.find_segments(name, 0, start, limit=limit)
        assert [(s.base_offset, s.last_offset) for s in got] == want

    try:
        check()
    finally:
        store.close()


def test_v16_drops_the_segments_foreign_keys_and_keeps_every_row(
        metadata_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version-15 database (segments with foreign keys, as released) migrated to 16: the
    same segment rows under the same ids, no foreign key left (PostgreSQL dropped them,
    SQLite rebuilt the table with its indexes), and commits and reads work on it."""
    from metadata import schema

    monkeypatch.setattr(schema, "LATEST_VERSION", 15)
    old = MetadataStore.open(metadata_url, create=True)
    old.create_topic("t", 2)
    for i in range(3):
        commit(old, f"k{i}", [chunk("t", 0, span=2), chunk("t", 1)])
    assert len(sa.inspect(old.engine).get_foreign_keys("segments")) == 2
    with old.engine.connect() as conn:
        before = conn.execute(sa.select(schema.segments).order_by(schema.segments.c.id)).all()
    old.close()
    monkeypatch.setattr(schema, "LATEST_VERSION", len(schema.MIGRATIONS))
    new = MetadataStore.open(metadata_url)
    assert new.schema_version() == 16
    inspector = sa.inspect(new.engine)
    assert inspector.get_foreign_keys("segments") == []
    assert {i["name"] for i in inspector.get_indexes("segments")} >= {
        "segments_file", "segments_live_by_offset", "segments_partition"}
    with new.engine.connect() as conn:
        after = conn.execute(sa.select(schema.segments).order_by(schema.segments.c.id)).all()
    assert after == before and len(after) == 6
    assert commit(new, "k3", [chunk("t", 0)]) == {("t", 0): 6}
    assert [s.base_offset for s in new.find_segments("t", 0, 0)] == [0, 2, 4, 6]
    new.close()
