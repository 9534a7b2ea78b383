"""Golden object files: `v1.silt` is an object of format version 1 and `v1.json` what it
holds, field by field (tests/fileformat/test_golden.py: the reader must decode it exactly,
the writer must reproduce it byte for byte from the same inputs).

Regenerate only on purpose, after a deliberate format change, and review the diff:

    python -m tests.fileformat.golden --write

No test writes them.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

from fileformat import (
    FOOTER_SIZE,
    OBJECT_HEADER_SIZE,
    FileWriter,
    KeyHasher,
    build_batch,
    iter_chunk_records,
    parse_footer,
    read_header,
)
from fileformat.batch import RecordTuple
from fileformat.chunkbuilder import ChunkBuilder
from fileformat.compression import Compression
from fileformat.datareader import DataReader
from fileformat.objectfile import FORMAT_VERSION, ChunkIndex, check_object_header
from fileformat.verify import read_object

HERE = Path(__file__).parent
OBJECT = HERE / f"v{FORMAT_VERSION}.silt"
EXPECTED = HERE / f"v{FORMAT_VERSION}.json"
SECRET = b"golden-cluster-secret"
T0 = 1_700_000_000_000  # every timestamp is T0 + something: no clock is read


def client_batches() -> list[bytes]:
    """Compressed batches as a Kafka client sends them (stored byte for byte). Their bytes
    are part of the golden inputs (`v1.json`), so reproducing the object never depends on a
    codec library compressing the same way twice."""
    gzip = build_batch([(0, T0 + 10, b"g1", b"gzip value " * 8, [("h", b"1")]),
                        (1, T0 + 11, None, b"gzip, null key " * 4, [])],
                       compression=Compression.GZIP)
    zstd = build_batch([(0, T0 + 12, b"z1", b"zstd value " * 8, []),
                        (1, T0 + 13, b"z2", None, [("h", None)])],
                       base_offset=2, compression=Compression.ZSTD)
    return [gzip, zstd]


def write_object(batches: list[bytes]) -> bytes:
    """The golden object from its inputs: `batches` (the client batches) and the fixed records
    below. Chunks in (topic, partition) order:

    - events/0: records an agent encodes itself (uncompressed, two batches, headers, a null key
      and a null value), base offset -1 (assigned at commit, as an agent writes it);
    - events/1: the client batches, gzip and zstd, appended as an agent appends them;
    - users/0: a compacted chunk as a compaction writes it: keyed (key hashes), absolute base
      offset 100, batches with holes between and inside them, tombstones, one with a
      first-cleaned time.
    """
    out = io.BytesIO()
    hasher = KeyHasher(SECRET)
    with FileWriter(out.write) as writer:
        events0 = ChunkBuilder("events", 0, max_batch_bytes=120)
        for i, (key, value) in enumerate([(b"a", b"first"), (None, b"no key"), (b"b", None),
                                          (b"c", b"x" * 100), (b"d", b"last")]):
            events0.append(T0 + i, key, value, [("trace", f"t{i}".encode())] if i % 2 else [])
        writer.add(events0.finish())
        events1 = ChunkBuilder("events", 1)
        for raw in batches:
            events1.append_batch(raw)
        writer.add(events1.finish())
        users0 = ChunkBuilder("users", 0, base_offset=100, hasher=hasher)
        survivors: list[list[RecordTuple]] = [
            [(0, T0 + 20, b"alice", b"v3", []), (2, T0 + 22, b"bob", None, [])],
            [(0, T0 + 25, b"carol", b"v1", [("src", b"web")]), (3, T0 + 28, b"dave", None, [])],
        ]
        raws = [build_batch(records) for records in survivors]
        offsets = [1, 3, 7, 10]  # chunk-relative: holes at 0, 2, 4-6, 8-9
        keys = [b"alice", b"bob", b"carol", b"dave"]
        users0.append_compacted_run(
            raws, bases=[1, 7], offsets=offsets, tombstones=[3, 10],
            key_hashes=b"".join(hasher.hash(k) for k in keys),
            tombstone_cleaned_at=[T0 + 30, 0])
        writer.add(users0.finish())
        writer.finish()
    return out.getvalue()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def describe(data: bytes) -> dict[str, Any]:
    """What the reader makes of `data`, as JSON-ready data: the layout, every chunk's index
    fields, key hashes, tombstone times, batch headers and bytes, and decoded records."""
    check_object_header(data[:OBJECT_HEADER_SIZE])
    layout, chunks = read_object(data)
    footer = parse_footer(data[-FOOTER_SIZE:])
    reader = DataReader(io.BytesIO(data[layout.data_offset:layout.meta_offset]),
                        layout.data_offset)
    out: list[dict[str, Any]] = []
    for index, hashes in chunks:
        raw = reader.read_chunk(index)
        out.append({
            **_index_fields(index),
            "key_hashes": [hashes[i:i + 16].hex() for i in range(0, len(hashes), 16)],
            "batches": _batches(raw, index),
            "records": [
                {"offset": r.offset, "timestamp": r.timestamp, "key": _b64(r.key),
                 "value": _b64(r.value), "headers": [[k, _b64(v)] for k, v in r.headers]}
                for r in iter_chunk_records(raw, max(index.base_offset, 0), index.offset_span,
                                            index=index)
            ],
        })
    return {
        "format_version": FORMAT_VERSION,
        "size": layout.size,
        "data_offset": layout.data_offset,
        "data_length": layout.data_length,
        "meta_offset": layout.meta_offset,
        "meta_length": layout.meta_length,
        "meta_crc": layout.meta_crc,
        "footer": dataclasses.asdict(footer),
        "chunks": out,
    }


def _index_fields(index: ChunkIndex) -> dict[str, Any]:
    return {
        "topic": index.topic, "partition": index.partition, "base_offset": index.base_offset,
        "data_pos": index.data_pos, "data_len": index.data_len, "hash_pos": index.hash_pos,
        "hash_count": index.hash_count, "batch_count": index.batch_count,
        "record_count": index.record_count, "offset_span": index.offset_span,
        "min_timestamp": index.min_timestamp, "max_timestamp": index.max_timestamp,
        "flags": index.flags, "frame_crc": index.frame_crc,
        "offsets": list(index.offsets), "tombstones": list(index.tombstones),
        "tombstone_cleaned_at": [int(t) for t in index.tombstone_cleaned_at],
    }


def _batches(raw: bytes, index: ChunkIndex) -> list[dict[str, Any]]:
    out = []
    pos = 0
    while pos < len(raw):
        header = read_header(memoryview(raw)[pos:])
        out.append({
            "base_offset": header.base_offset, "length": header.length,
            "leader_epoch": header.leader_epoch, "crc": header.crc,
            "attributes": header.attributes, "compression": header.compression.name.lower(),
            "last_offset_delta": header.last_offset_delta,
            "first_timestamp": header.first_timestamp, "max_timestamp": header.max_timestamp,
            "producer_id": header.producer_id, "producer_epoch": header.producer_epoch,
            "base_sequence": header.base_sequence, "record_count": header.record_count,
            "bytes": _b64(raw[pos:pos + header.length]),
        })
        pos += header.length
    assert pos == index.data_len
    return out


def inputs(expected: dict[str, Any]) -> list[bytes]:
    """The client batches recorded in `expected` (events/1's stored batches)."""
    chunk = next(c for c in expected["chunks"] if (c["topic"], c["partition"]) == ("events", 1))
    return [base64.b64decode(b["bytes"]) for b in chunk["batches"]]


def regenerate() -> None:
    """Write v<N>.silt and v<N>.json anew from fresh inputs (compressing the client batches
    again)."""
    data = write_object(client_batches())
    OBJECT.write_bytes(data)
    EXPECTED.write_text(json.dumps(describe(data), indent=1) + "\n")
