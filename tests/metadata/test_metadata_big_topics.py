"""Big topic changes on SQLite and PostgreSQL: a 100,000-partition topic is created and
deleted in bounded transactions while small writes (an agent heartbeat, a flush commit)
keep committing within a second; a crash in the middle leaves nothing visible and is
finished later; partition limits and topic-name rules are checked before anything is
allocated, by a validate-only create exactly as by a real one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from clock import ManualClock
from metadata import MetadataStore, topics
from metadata import schema as s
from metadata.config import MetadataConfig
from metadata.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    PolicyViolationError,
    TopicExistsError,
    UnknownTopicError,
)
from tests.metadata.metadata_helpers import chunk, commit

BIG = 100_000
# A small write waits at most for one batch of a big change; a second is the promise.
MAX_WAIT_S = 1.0


@pytest.fixture
def roomy(metadata_url: str, clock: ManualClock) -> Iterator[MetadataStore]:
    """A store whose max.partitions leaves room for a BIG-partition topic and others."""
    md = MetadataStore.open(metadata_url, clock=clock, create=True,
                            config=MetadataConfig(max_partitions=2 * BIG))
    yield md
    md.close()


def rows(store: MetadataStore, table: sa.Table) -> int:
    with store.read() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


class SmallWrites:
    """A thread heartbeating an agent and committing a one-chunk file to topic `small`
    every PAUSE_S (an agent flushes every 250 ms at most), keeping the longest time one of
    them took."""

    PAUSE_S = 0.02

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.longest = 0.0
        self.done = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        prefix = f"small-{id(self)}"
        while not self._stop.is_set():
            key = f"{prefix}-{n}"
            for write in (lambda: self.store.heartbeat_agent("a1"),
                          lambda: commit(self.store, key, [chunk("small", 0)])):  # noqa: B023
                started = time.perf_counter()
                try:
                    write()
                except BaseException as exc:  # reported by the test
                    self.errors.append(exc)
                    return
                self.longest = max(self.longest, time.perf_counter() - started)
                self.done += 1
                self._stop.wait(self.PAUSE_S)
            n += 1

    def __enter__(self) -> SmallWrites:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def test_a_big_topic_is_created_and_deleted_without_blocking_small_writes(
        roomy: MetadataStore) -> None:
    roomy.register_agent("a1", "127.0.0.1", 9092)
    roomy.create_topic("small", 1)
    with SmallWrites(roomy) as small:
        created = timed(lambda: roomy.create_topic("big", BIG))
    assert not small.errors and small.done >= 2
    assert small.longest < MAX_WAIT_S, (small.longest, created)
    assert roomy.get_topic("big").partitions == BIG
    assert rows(roomy, s.partitions) == BIG + 1
    # data on the first 20,000 partitions and the last, one object shared with another
    # topic: each deleted partition row has its foreign keys checked against them
    for first in range(0, 20_000, 5_000):
        commit(roomy, f"big-{first}", [chunk("big", p) for p in range(first, first + 5_000)])
    commit(roomy, "shared", [chunk("big", BIG - 1), chunk("small", 0)])
    with SmallWrites(roomy) as small:
        deleted = timed(lambda: roomy.delete_topic("big"))
    assert not small.errors and small.done >= 2
    assert small.longest < MAX_WAIT_S, (small.longest, deleted)
    assert deleted < 30  # 95 s on PostgreSQL before schema v7's indexes
    assert [t.name for t in roomy.list_topics()] == ["small"]
    assert rows(roomy, s.partitions) == 1 and rows(roomy, s.topics) == 1
    with roomy.read() as conn:  # only the small topic's segments are live
        live = conn.execute(sa.select(s.segments.c.topic_id).where(s.LIVE)).scalars().all()
    assert set(live) == {roomy.get_topic("small").id}
    print(f"\n{roomy.dialect}: created {BIG} partitions in {created:.2f} s, deleted in"
          f" {deleted:.2f} s; longest small write {small.longest * 1000:.0f} ms")


def test_a_deletion_cut_short_is_invisible_and_finished_later(
        store: MetadataStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics, "BATCH_PARTITIONS", 3)
    store.create_topic("doomed", 10)
    commit(store, "f1", [chunk("doomed", 0), chunk("doomed", 9)])
    batches = 0
    real = store.commit

    def crash_after_two_batches(what: str, *args: object, **kwargs: object) -> object:
        nonlocal batches
        if what.startswith("dropping"):
            batches += 1
            if batches > 2:
                raise KeyboardInterrupt  # the process dies mid-way
        return real(what, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "commit", crash_after_two_batches)
    with pytest.raises(KeyboardInterrupt):
        store.delete_topic("doomed")
    monkeypatch.setattr(store, "commit", real)
    # deleted for every reader, the name free, the data half dropped
    with pytest.raises(UnknownTopicError):
        store.get_topic("doomed")
    assert store.list_topics() == [] and store.stats().topics == 0
    assert 0 < rows(store, s.partitions) < 10
    store.create_topic("doomed", 2)  # a new topic of the same name
    assert store.finish_hidden() == 1
    assert rows(store, s.partitions) == 2 and store.get_topic("doomed").partitions == 2
    with store.read() as conn:
        assert conn.execute(sa.select(s.files.c.state).where(
            s.files.c.object_key == "f1")).scalar() == s.FILE_RETIRED


def test_a_creation_cut_short_is_invisible_and_removed_once_abandoned(
        store: MetadataStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topics, "BATCH_PARTITIONS", 3)

    def die(*args: object) -> None:
        raise KeyboardInterrupt  # the process dies after the first batch

    real = topics._finish_create
    monkeypatch.setattr(topics, "_finish_create", die)
    with pytest.raises(KeyboardInterrupt):
        store.create_topic("half", 10)
    monkeypatch.setattr(topics, "_finish_create", real)
    with pytest.raises(UnknownTopicError):
        store.get_topic("half")
    assert store.list_topics() == [] and rows(store, s.partitions) == 3
    assert store.finish_hidden() == 0  # maybe still under way
    clock.advance(topics.ABANDONED_CREATE_MS + 1)
    assert store.finish_hidden() == 1
    assert rows(store, s.partitions) == 0 and rows(store, s.topics) == 0
    store.create_topic("half", 10)  # batched, to the end
    assert store.get_topic("half").partitions == 10 and rows(store, s.partitions) == 10


def test_partition_limits_are_checked_before_anything_is_allocated(
        metadata_url: str, clock: ManualClock) -> None:
    with MetadataStore.open(metadata_url, clock=clock, create=True,
                            config=MetadataConfig(max_partitions=10)) as md:
        md.create_topic("a", 6)
        for validate_only in (True, False):
            with pytest.raises(PolicyViolationError, match=r"max\.partitions"):
                md.create_topic("b", 5, validate_only=validate_only)
            started = time.perf_counter()
            with pytest.raises(PolicyViolationError, match=r"max\.partitions"):
                md.create_topic("b", 2**31 - 1, validate_only=validate_only)
            assert time.perf_counter() - started < 1
            for bad in (0, -1):
                with pytest.raises(InvalidPartitionsError):
                    md.create_topic("b", bad, validate_only=validate_only)
            with pytest.raises(PolicyViolationError, match=r"max\.partitions"):
                md.add_partitions("a", 11, validate_only=validate_only)
            with pytest.raises(PolicyViolationError, match=r"max\.partitions"):
                md.add_partitions("a", 2**31 - 1, validate_only=validate_only)
        assert md.create_topic("b", 4, validate_only=True).id == 0
        assert [t.name for t in md.list_topics()] == ["a"]
        md.create_topic("b", 4)
        with pytest.raises(PolicyViolationError):
            md.add_partitions("a", 7)
        md.delete_topic("b")
        assert md.add_partitions("a", 10).partitions == 10


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a" * 32_767, "bad/name",
                                  "sp ace", "ü", "/d/1", "a\x00"])
def test_illegal_names_are_refused_by_a_check_and_a_create(store: MetadataStore,
                                                          name: str) -> None:
    for validate_only in (True, False):
        with pytest.raises(InvalidTopicError) as refused:
            store.create_topic(name, 1, validate_only=validate_only)
        assert len(str(refused.value)) < 300
    assert store.list_topics() == []
    store.create_topic("a" * 249, 1)
    store.create_topic("ok.-_", 1)


def test_names_differing_only_by_dot_and_underscore_collide(store: MetadataStore) -> None:
    store.create_topic("a.b", 1)
    for validate_only in (True, False):
        with pytest.raises(InvalidTopicError, match="collides"):
            store.create_topic("a_b", 1, validate_only=validate_only)
        with pytest.raises(TopicExistsError):
            store.create_topic("a.b", 1, validate_only=validate_only)
    store.delete_topic("a.b")
    store.create_topic("a_b", 1)
