"""`ObjectUpload` and `abandoning`: the rows and objects each exit leaves (objects/upload.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fileformat import Chunk, ChunkBuilder
from metadata import MetadataStore
from metadata.errors import CommitConflictError, CommitUnknownError
from objects import ObjectUpload, abandon_files, abandoning
from objects.keys import COMPACTED_PREFIX, DATA_PREFIX, compacted_key, data_key
from objectstore import ObjectStore, open_store


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[ObjectStore, MetadataStore]]:
    md = MetadataStore.open(f"sqlite:///{tmp_path / 'md.db'}", create=True)
    md.create_topic("t", 1)
    yield open_store(f"file://{tmp_path / 'objects'}"), md
    md.close()


def chunk() -> Chunk:
    b = ChunkBuilder("t", 0)
    b.append(1, b"k", b"v", ())
    return b.finish()


def test_keys_are_time_ordered_under_their_prefixes() -> None:
    assert data_key().startswith(DATA_PREFIX) and data_key().endswith(".silt")
    assert compacted_key(2, True).startswith(f"{COMPACTED_PREFIX}L2-")
    assert compacted_key(1, False).endswith("-d.silt")


def test_written_and_committed(env: tuple[ObjectStore, MetadataStore]) -> None:
    store, md = env
    up = ObjectUpload(store, md, data_key())
    assert md.get_file(up.file_id).state == "pending" and not up.finished
    with abandoning(store, md, [up]):
        layout = up.write([chunk()])
        assert md.commit_file(up.file_id, layout) == {("t", 0): 0}
    f = md.get_file(up.file_id)
    assert (f.state, f.size) == ("live", layout.size) and store.get(up.key)


@pytest.mark.parametrize("delete", [False, True])
def test_definite_failure_abandons(env: tuple[ObjectStore, MetadataStore], delete: bool) -> None:
    store, md = env
    done, open_ = ObjectUpload(store, md, data_key()), ObjectUpload(store, md, data_key())
    with pytest.raises(CommitConflictError), abandoning(store, md, [done, open_], delete=delete):
        done.write([chunk()])
        open_.start().add(chunk())
        raise CommitConflictError("refused")
    assert {md.get_file(u.file_id).state for u in (done, open_)} == {"abandoned"}
    assert [o.key for o in store.list(DATA_PREFIX)] == ([] if delete else [done.key])


def test_unknown_outcome_leaves_rows(env: tuple[ObjectStore, MetadataStore]) -> None:
    store, md = env
    up = ObjectUpload(store, md, data_key())
    with pytest.raises(CommitUnknownError), abandoning(store, md, [up], delete=True):
        up.write([chunk()])
        raise CommitUnknownError("lost reply")
    assert md.get_file(up.file_id).state == "pending"
    assert [o.key for o in store.list(DATA_PREFIX)] == [up.key]


def test_abandon_files_leaves_live_ones(env: tuple[ObjectStore, MetadataStore]) -> None:
    store, md = env
    live, pending = ObjectUpload(store, md, data_key()), ObjectUpload(store, md, data_key())
    md.commit_file(live.file_id, live.write([chunk()]))
    abandon_files(md, [live.file_id, pending.file_id])
    assert [md.get_file(u.file_id).state for u in (live, pending)] == ["live", "abandoned"]
