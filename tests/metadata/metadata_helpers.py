"""Shared helpers for the metadata tests: chunk builders."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from metadata import ChunkMeta, MetadataStore
from tests.layouts import layout


def chunk(topic: str, partition: int, span: int = 1, records: int | None = None) -> ChunkMeta:
    """A chunk of `span` offsets (all present unless `records` says fewer)."""
    return ChunkMeta(
        topic=topic, partition=partition,
        record_count=span if records is None else records, offset_span=span,
        data_pos=100 * partition, data_len=100, hash_pos=0, hash_count=span, batch_count=1,
        min_timestamp=1, max_timestamp=2, tombstone_count=0, frame_crc=0,
    )


def commit(store: MetadataStore, key: str, chunks: list[ChunkMeta]) -> dict[tuple[str, int], int]:
    """Register and commit one object holding `chunks`."""
    fid = store.register_pending_file(key)
    return store.commit_file(fid, layout(chunks, size=1000, data_offset=8, data_length=900,
                                         meta_offset=908, meta_length=92))


def lose_next_commit(monkeypatch: pytest.MonkeyPatch, applied: bool) -> dict[str, bool]:
    """Make the next COMMIT fail as if the connection dropped, after (`applied`) or instead
    of applying it. Returns the flag, cleared once the failure has fired."""
    real_commit = sa.engine.RootTransaction.commit
    armed = {"on": True}

    def failing_commit(self: sa.engine.RootTransaction) -> Any:
        if not armed["on"]:
            return real_commit(self)
        armed["on"] = False
        if applied:
            real_commit(self)
        else:
            self.rollback()
        raise sa.exc.OperationalError("COMMIT", None, RuntimeError("connection lost"))

    monkeypatch.setattr(sa.engine.RootTransaction, "commit", failing_commit)
    return armed
