"""The agent's produce path on bad input and on topics changed under it: a refused batch or
record leaves nothing behind, a topic deleted before the commit fails only its own records,
and the topic cache is refreshed even while flushes follow each other without a pause.
In-process agents on a file store and each metadata backend."""

from __future__ import annotations

import queue
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest

from agent import Agent, AgentConfig, InvalidRecordError
from clock import ManualClock
from fileformat import CorruptDataError, FormatError, build_batch
from fileformat.batch import ATTRIBUTES_POS, CONTROL_MASK, CRC_POS, RECORD_COUNT_POS
from fileformat.errors import ControlBatchError, RecordCountError
from metadata import MetadataStore
from metadata.errors import UnknownPartitionError, UnknownTopicError
from metadata.topicconfig import AlterOp, ConfigChange
from objectstore import ObjectStore, ObjectWriter, StoreWrapper, open_store
from tests.idempotence.helpers import client_batch

GOOD = build_batch([(0, 1, b"k", b"v", []), (1, 2, b"k", b"w", [])])


def _resealed(raw: bytes, *, attributes: int | None = None, count: int | None = None) -> bytes:
    """`raw` with its attributes or record count changed and a valid CRC again."""
    out = bytearray(raw)
    if attributes is not None:
        struct.pack_into(">h", out, ATTRIBUTES_POS, attributes)
    if count is not None:
        struct.pack_into(">i", out, RECORD_COUNT_POS, count)
    struct.pack_into(">I", out, CRC_POS, crc32c.crc32c(bytes(out[ATTRIBUTES_POS:])))
    return bytes(out)


def _bad_crc(raw: bytes) -> bytes:
    out = bytearray(raw)
    out[-1] ^= 1
    return bytes(out)


BAD = {
    "crc": (_bad_crc(GOOD), CorruptDataError),
    "empty": (_resealed(GOOD, count=0), CorruptDataError),
    "control": (_resealed(GOOD, attributes=CONTROL_MASK), ControlBatchError),
}


@pytest.fixture
def md(metadata_url: str) -> Iterator[MetadataStore]:
    store = MetadataStore.open(metadata_url, create=True)
    yield store
    store.close()


@pytest.fixture
def other(metadata_url: str) -> Iterator[MetadataStore]:
    """Another handle on the same metadata: another agent's admin requests."""
    store = MetadataStore.open(metadata_url, create=True)
    yield store
    store.close()


def _agent(md: MetadataStore, tmp_path: Path) -> Agent:
    """An agent that flushes only when told to."""
    return Agent(open_store(f"file://{tmp_path}/objects"), md, AgentConfig(linger_ms=10_000))


@pytest.mark.parametrize("bad", list(BAD))
def test_a_refused_batch_takes_no_room_and_buffers_nothing(
        md: MetadataStore, tmp_path: Path, bad: str) -> None:
    """A batch refused for its CRC, for holding no record or for being a control batch
    (checks the chunk builder makes) raises at once and leaves nothing: no buffer.memory
    held, no (empty) chunk in the buffer, so the next flush commits the other partitions.
    Before the fix the single batch of a plain topic took its room for good and left an
    empty chunk whose commit failed the next flush with KAFKA_STORAGE_ERROR for everyone."""
    raw, error = BAD[bad]
    md.create_topic("t", 2)
    with _agent(md, tmp_path) as agent:
        with pytest.raises(error):
            agent.produce_batches("t", 0, [raw])
        assert agent.buffer_used == 0
        good = agent.produce_batches("t", 1, [GOOD])
        agent.flush()
        assert good[0].result(timeout=30) == 0
        assert agent.buffer_used == 0
    assert [p.next_offset for p in md.partitions("t")] == [0, 2]


def test_a_refused_batch_stores_none_of_its_partition(md: MetadataStore, tmp_path: Path) -> None:
    """Of one call's batches for a partition, a bad one (here empty, found only by the chunk
    builder) refuses them all: the good batch before it is not buffered either, so the
    client told the partition failed finds none of it committed (a retry adds no
    duplicate). Before the fix the first batch was buffered and committed anyway."""
    md.create_topic("t", 1)
    with _agent(md, tmp_path) as agent:
        with pytest.raises(FormatError):
            agent.produce_batches("t", 0, [GOOD, BAD["empty"][0]])
        assert agent.buffer_used == 0
        agent.flush()
        assert agent.totals.objects == 0
        assert agent.produce_batches("t", 0, [GOOD])[0].result(timeout=30) == 0
    assert [p.next_offset for p in md.partitions("t")] == [2]


def test_a_batch_whose_offsets_jump_is_refused(md: MetadataStore, tmp_path: Path) -> None:
    """A producer's batch spans exactly its record count (Kafka's LogValidator: lastOffsetDelta
    = count - 1, offsetDelta = index): one record at delta 2**31 - 1 is refused with nothing
    buffered. Before, three of them were stored and moved the log end by 3 * 2**31 (the
    issue's 70-byte request that poisoned a partition)."""
    md.create_topic("t", 1)
    jump = build_batch([(2**31 - 1, 1, b"k", b"v", [])])
    with _agent(md, tmp_path) as agent:
        with pytest.raises(RecordCountError):
            agent.produce_batches("t", 0, [jump] * 3)
        assert agent.buffer_used == 0
    assert [p.next_offset for p in md.partitions("t")] == [0]


def test_a_refused_record_leaves_no_empty_chunk(md: MetadataStore, tmp_path: Path) -> None:
    """A record the batch builder refuses (a str value) raises at once; the chunk opened for
    it holds no record and is left out of the flush, which commits the other partitions.
    Before the fix that empty chunk failed the whole next flush."""
    md.create_topic("t", 2)
    with _agent(md, tmp_path) as agent:
        with pytest.raises(TypeError):
            agent.produce("t", 0, b"k", "not bytes")  # type: ignore[arg-type]
        good = agent.produce("t", 1, b"k", b"v")
        agent.flush()
        assert good.result(timeout=30) == 0
    assert [p.next_offset for p in md.partitions("t")] == [0, 1]


def test_a_topic_gone_before_the_commit_fails_only_its_records(
        md: MetadataStore, other: MetadataStore, tmp_path: Path) -> None:
    """Topics deleted (or recreated with fewer partitions) through another agent while this
    one buffered records for them: their records and idempotent batches fail with
    UnknownTopicError / UnknownPartitionError and are not stored (their bytes are dead
    space in the object), the rest of the flush commits, and the dropped topic cache makes
    the next produce to the deleted topic fail at once. A flush holding only such records
    commits nothing and leaves its object abandoned. Before the fix one deleted topic
    failed the whole flush for every topic."""
    for name, count in (("keep", 1), ("gone", 1), ("shrunk", 2), ("alone", 1)):
        md.create_topic(name, count)
    pid = md.allocate_producer_id()
    with _agent(md, tmp_path) as agent:
        keep = agent.produce("keep", 0, b"k", b"v")
        gone = agent.produce("gone", 0, b"k", b"v")
        gone_idem = agent.produce_batches("gone", 0, [client_batch(pid, 0, 0)])[0]
        shrunk = agent.produce("shrunk", 1, b"k", b"v")
        kept = agent.produce("shrunk", 0, b"k", b"v")
        other.delete_topic("gone")
        other.delete_topic("shrunk")
        other.create_topic("shrunk", 1)
        agent.flush()
        assert keep.result(timeout=30) == 0
        assert kept.result(timeout=30) == 0
        for fut in (gone, gone_idem):
            with pytest.raises(UnknownTopicError, match="'gone'"):
                fut.result(timeout=30)
        with pytest.raises(UnknownPartitionError, match="no partition 1"):
            shrunk.result(timeout=30)
        with pytest.raises(UnknownTopicError):
            agent.produce("gone", 0, b"k", b"v")
        assert agent.totals.objects == 1
        alone = agent.produce("alone", 0, b"k", b"v")
        other.delete_topic("alone")
        agent.flush()
        with pytest.raises(UnknownTopicError, match="'alone'"):
            alone.result(timeout=30)
        assert agent.totals.objects == 1
    assert [p.next_offset for p in md.partitions("keep")] == [1]
    assert [p.next_offset for p in md.partitions("shrunk")] == [1]
    assert [f.state for f in md.files_to_gc(older_than_ms=2**62)] == ["abandoned"]


class SteppedStore(StoreWrapper):
    """Each object upload announces itself on `started` and then waits for one `release`."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.started: queue.Queue[str] = queue.Queue()
        self.release = threading.Semaphore(0)

    def put_stream(self, key: str) -> ObjectWriter:
        self.started.put(key)
        self.release.acquire()
        return self.inner.put_stream(key)


def test_topic_cache_is_refreshed_between_back_to_back_flushes(
        md: MetadataStore, other: MetadataStore, tmp_path: Path, clock: ManualClock) -> None:
    """Under sustained load a sealed buffer is waiting whenever a flush ends, so the flusher
    never idles; it must still drop the cached topics every topic.refresh.ms, or another
    agent's config change is never seen. Before the fix the cache was dropped only when
    the flusher found nothing to flush."""
    md.create_topic("t", 1)
    store = SteppedStore(open_store(f"file://{tmp_path}/objects"))
    agent = Agent(store, md, AgentConfig(linger_ms=0, flush_bytes=1, topic_refresh_ms=1000),
                  clock=clock)
    try:
        first = agent.produce("t", 0, None, b"v")  # sealed at once: flush 1
        store.started.get(timeout=30)  # flush 1 waits at its upload
        other.alter_topic_configs("t", [ConfigChange("cleanup.policy", AlterOp.SET, "compact")])
        clock.advance(1000)
        second = agent.produce("t", 0, None, b"v")  # cached (delete): sealed behind flush 1
        store.release.release()
        store.started.get(timeout=30)  # flush 2 at its upload: the flusher went straight on
        with pytest.raises(InvalidRecordError, match="must have a key"):
            agent.produce("t", 0, None, b"v")
    finally:
        store.release.release(100)
        agent.close()
    assert (first.result(timeout=30), second.result(timeout=30)) == (0, 1)
