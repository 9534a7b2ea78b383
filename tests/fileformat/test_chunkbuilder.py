"""ChunkBuilder: client batches stored byte for byte, compactor batches placed with their index
data, the builder unchanged by a refused append, its batches the reference encoder's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from fileformat import (
    NULL_KEY_HASH,
    ChunkBuilder,
    Compression,
    CorruptDataError,
    KeyHasher,
    build_batch,
    decode_batch,
    encode_file,
    iter_chunk_records,
    read_object,
    verify_batch,
)
from fileformat.encoder import BatchEncoderReference
from fileformat.errors import OldMagicError

HASHER = KeyHasher(b"cluster-secret")


def aiokafka_batch(n: int, *, null_every: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=77,
        producer_epoch=3,
        base_sequence=12,
        batch_size=1 << 20,
    )
    for i in range(n):
        value = None if null_every and i % null_every == 0 else b"value-%d" % i
        builder.append(i, timestamp=500 + i, key=b"key-%d" % i, value=value, headers=[])
    return bytes(builder.build())


@pytest.mark.parametrize("keyed", [False, True])
def test_client_batches_are_stored_byte_for_byte(keyed: bool) -> None:
    builder = ChunkBuilder("t", 3, hasher=HASHER if keyed else None)
    builder.append(1, b"first", b"x")
    raw1, raw2 = aiokafka_batch(5, null_every=2), aiokafka_batch(3)
    assert builder.append_batch(raw1) == (1, 5)
    assert builder.append_batch(raw2) == (6, 3)
    data, layout = encode_file([builder.finish()])
    ci = layout.chunks[0]
    stored = data[ci.data_pos : ci.data_end]
    tail = stored[len(stored) - len(raw1) - len(raw2) :]
    assert tail[: len(raw1)][8:] == raw1[8:]
    assert tail[len(raw1) :][8:] == raw2[8:]
    assert verify_batch(tail).base_offset == 1
    assert verify_batch(tail[len(raw1) :]).base_offset == 6
    records = list(iter_chunk_records(stored, 100, index=ci))
    assert [r.offset for r in records] == list(range(100, 109))
    assert records[1].key == b"key-0" and records[1].value is None
    hashes = read_object(data)[1][0][1]
    if keyed:
        assert list(ci.tombstones) == [1, 3, 5]
        assert hashes[16:32] == HASHER.hash(b"key-0")
    else:
        assert hashes == b"" and not ci.tombstones


def test_append_batch_rejects_bad_input() -> None:
    builder = ChunkBuilder("t", 0)
    raw = bytearray(aiokafka_batch(2))
    raw[-1] ^= 1
    with pytest.raises(CorruptDataError):
        builder.append_batch(bytes(raw))
    raw = bytearray(aiokafka_batch(2))
    raw[16] = 1
    with pytest.raises(OldMagicError):
        builder.append_batch(bytes(raw))
    with pytest.raises(CorruptDataError):
        builder.append_batch(aiokafka_batch(2) + b"\0")
    assert builder.record_count == 0


def test_append_compacted_places_gapped_batches() -> None:
    builder = ChunkBuilder("t", 0, base_offset=5000, keyed=True)
    survivors = [(2, 10, b"a", b"1", ()), (5, 11, b"b", None, ()), (9, 12, b"c", b"3", ())]
    raw = build_batch(survivors, compression=Compression.ZSTD)
    hashes = HASHER.hash_many([b"a", b"b", b"c"])
    builder.append_compacted(
        raw, base=100, offsets=np.array([102, 105, 109]), tombstones=[105], key_hashes=hashes
    )
    with pytest.raises(ValueError, match="below"):
        builder.append_compacted(raw, base=105, offsets=[107, 110, 114], key_hashes=hashes)
    with pytest.raises(ValueError, match="offsets"):
        builder.append_compacted(raw, base=200, offsets=[202, 205], key_hashes=hashes)
    with pytest.raises(ValueError, match="rise"):
        builder.append_compacted(raw, base=200, offsets=[202, 202, 209], key_hashes=hashes)
    with pytest.raises(ValueError, match="hashes"):
        builder.append_compacted(raw, base=200, offsets=[202, 205, 209], key_hashes=b"")
    with pytest.raises(ValueError, match="hasher"):
        builder.append(0, b"k", b"v")
    data, _layout = encode_file([builder.finish()])
    ci, got_hashes = read_object(data)[1][0]
    assert (ci.base_offset, ci.offset_span, ci.record_count) == (5000, 110, 3)
    assert list(ci.offsets) == [102, 105, 109] and list(ci.tombstones) == [105]
    assert got_hashes == hashes
    records = list(iter_chunk_records(data[ci.data_pos : ci.data_end], ci.base_offset, index=ci))
    assert [(r.offset, r.key, r.value) for r in records] == [
        (5102, b"a", b"1"),
        (5105, b"b", None),
        (5109, b"c", b"3"),
    ]


def test_append_compacted_run_places_several_batches_or_none() -> None:
    builder = ChunkBuilder("t", 0, base_offset=0, keyed=True)
    first = build_batch([(0, 10, b"a", b"1", ()), (3, 11, b"b", None, ())])
    second = build_batch([(1, 12, b"c", b"3", ())], compression=Compression.LZ4)
    hashes = HASHER.hash_many([b"a", b"b", b"c"])
    good: dict[str, Any] = {"offsets": [10, 13, 21], "tombstones": [13], "key_hashes": hashes,
            "tombstone_cleaned_at": [7]}
    bad: list[tuple[dict[str, Any], str]] = [
        ({"bases": [10, 13]}, "below"),  # the second batch overlaps the first
        ({"bases": [10]}, "one base per batch"),
        ({"offsets": [10, 13, 20]}, "ending at its last"),
        ({"offsets": [10, 21]}, "offsets given"),
        ({"offsets": [9, 13, 21]}, "offsets must rise"),
        ({"tombstones": [12]}, "subset"),
        ({"key_hashes": hashes[:32]}, "hashes"),
    ]
    for change, match in bad:
        args: dict[str, Any] = {"bases": [10, 20], **good, **change}
        with pytest.raises(ValueError, match=match):
            builder.append_compacted_run([first, second], **args)
    assert builder.record_count == 0 and builder.next_offset == 0  # unchanged
    builder.append_compacted_run([first, second], bases=[10, 20], **good)
    assert (builder.record_count, builder.next_offset) == (3, 22)
    data, _layout = encode_file([builder.finish()])
    ci, got_hashes = read_object(data)[1][0]
    assert list(ci.offsets) == [10, 13, 21] and list(ci.tombstones) == [13]
    assert ci.tombstone_cleaned_at.tolist() == [7] and got_hashes == hashes
    records = list(iter_chunk_records(data[ci.data_pos : ci.data_end], 0, index=ci))
    assert [(r.offset, r.key) for r in records] == [(10, b"a"), (13, b"b"), (21, b"c")]


def test_null_key_hash() -> None:
    builder = ChunkBuilder("t", 0, hasher=HASHER)
    builder.append(0, None, b"v")
    data, _ = encode_file([builder.finish()])
    assert read_object(data)[1][0][1] == NULL_KEY_HASH


def test_failed_append_leaves_the_builder_consistent() -> None:
    builder = ChunkBuilder("t", 0)
    with pytest.raises(TypeError):
        builder.append(0, "not bytes", b"v")  # type: ignore[arg-type]
    assert builder.finish().batch_count == 0
    builder = ChunkBuilder("t", 0)
    builder.append(0, None, b"a")
    with pytest.raises(TypeError):
        builder.append(1, "not bytes", b"v")  # type: ignore[arg-type]
    builder.append(2, None, b"c")
    data, _ = encode_file([builder.finish()])
    ci, _ = read_object(data)[1][0]
    records = list(iter_chunk_records(data[ci.data_pos : ci.data_end], 0, index=ci))
    assert [(r.offset, r.value) for r in records] == [(0, b"a"), (1, b"c")]


@settings(max_examples=50, deadline=None)
@given(stamps=st.lists(st.integers(0, 2**45), min_size=1, max_size=40),
       batch_bytes=st.integers(1, 400))
def test_chunk_builder_batches_are_the_reference_encoders(stamps: list[int],
                                                          batch_bytes: int) -> None:
    """ChunkBuilder's batches (sealed by size) are what the reference encoder makes of the
    same records, and its timestamps are the records' extremes."""
    builder = ChunkBuilder("t", 0, max_batch_bytes=batch_bytes)
    for i, ts in enumerate(stamps):
        assert builder.append(ts, b"k%d" % i, b"v" * (i % 50), [("h", b"%d" % i)]) == i
    chunk = builder.finish()
    assert (chunk.min_timestamp, chunk.max_timestamp) == (min(stamps), max(stamps))
    assert (chunk.record_count, chunk.offset_span) == (len(stamps), len(stamps))
    rel = 0
    for batch in chunk.batches:
        reference = BatchEncoderReference()
        for rec in decode_batch(batch):
            reference.append(rec.offset - rel, rec.timestamp, rec.key, rec.value,
                             list(rec.headers))
        count = reference.record_count
        assert batch == reference.finish(rel)
        rel += count
    assert rel == len(stamps)


class _FailingFinish(BatchEncoderReference):
    def finish(self, base_offset: int = 0) -> bytes:
        raise MemoryError


def test_a_batch_that_cannot_be_sealed_fails_the_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its records are lost, so the chunk must never be written (the flush fails)."""
    monkeypatch.setattr("fileformat.chunkbuilder.BatchEncoder", _FailingFinish)
    builder = ChunkBuilder("t", 0, max_batch_bytes=100)
    builder.append(1, b"k", b"v")
    with pytest.raises(MemoryError):
        builder.append(2, b"k", b"v" * 200)  # fills the batch: sealed in this call
    with pytest.raises(RuntimeError, match="finished"):
        builder.finish()
