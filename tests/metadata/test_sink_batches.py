"""Exactly-once streaming sinks in the metadata store: a micro-batch's files and its batch id
committed in one transaction; a batch id at or below the recorded one commits nothing."""

from __future__ import annotations

import pytest

from fileformat import FileLayout
from metadata import ChunkMeta, MetadataStore
from metadata.errors import FileStateError, InvalidCommitError
from tests.layouts import layout as file_layout


def _layout(partition: int, n: int) -> FileLayout:
    chunk = ChunkMeta(topic="t", partition=partition, offset_span=n, record_count=n,
                      data_pos=0, data_len=10, hash_pos=0, hash_count=0, batch_count=1,
                      min_timestamp=0, max_timestamp=0, tombstone_count=0, frame_crc=0)
    return file_layout((chunk,), size=100, data_offset=0, data_length=10, meta_offset=10,
                       meta_length=10)


def test_a_batch_commits_once(metadata_url: str) -> None:
    md = MetadataStore.open(metadata_url, create=True)
    other = MetadataStore.open(metadata_url)  # a second handle: a restarted driver
    md.create_topic("t", 2)
    assert md.last_sink_batch("q") is None
    a, b = md.register_pending_file("a"), md.register_pending_file("b")
    assert md.commit_sink_batch("q", 0, [(a, _layout(0, 3)), (b, _layout(1, 2))]) == [
        {("t", 0): 0}, {("t", 1): 0}]
    replay = other.register_pending_file("replay")
    assert other.commit_sink_batch("q", 0, [(replay, _layout(0, 3))]) is None
    assert other.get_file(replay).state == "pending"  # the caller abandons it
    assert [p.next_offset for p in md.partitions("t")] == [3, 2]
    assert md.commit_sink_batch("q", 1, []) == []  # an empty batch is recorded too
    assert other.last_sink_batch("q") == 1
    c = md.register_pending_file("c")
    assert md.commit_sink_batch("other-query", 0, [(c, _layout(0, 1))]) == [{("t", 0): 3}]
    # A failing batch records nothing: its id may be committed later.
    d, e = md.register_pending_file("d"), md.register_pending_file("e")
    md.abandon_file(e)
    with pytest.raises(FileStateError):
        md.commit_sink_batch("q", 2, [(d, _layout(0, 1)), (e, _layout(1, 1))])
    assert md.last_sink_batch("q") == 1
    assert md.commit_sink_batch("q", 2, [(d, _layout(0, 1))]) == [{("t", 0): 4}]
    with pytest.raises(InvalidCommitError, match="sink id"):
        md.commit_sink_batch("", 3, [])
    other.close()
    md.close()
