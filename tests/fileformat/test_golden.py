"""The golden object (tests/fileformat/golden/): the reader decodes it exactly as its JSON
says, field by field, and the writer reproduces it byte for byte from the same inputs. A change
made alike in the writer and the reader fails here; regenerating the files
(`python -m tests.fileformat.golden --write`) is a deliberate format change."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from fileformat import iter_meta, verify_streams
from fileformat.objectfile import FORMAT_VERSION, OBJECT_MAGIC
from tests.fileformat.golden import EXPECTED, OBJECT, describe, inputs, write_object


@pytest.fixture(scope="module")
def golden() -> tuple[bytes, dict[str, Any]]:
    return OBJECT.read_bytes(), json.loads(EXPECTED.read_text())


def _fields(actual: Any, expected: Any, where: str) -> None:
    """Compare JSON-like values key by key, naming the first field that differs."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), where
        for key in expected:
            _fields(actual[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _fields(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, where


def test_it_is_the_current_format_version(golden: tuple[bytes, dict[str, Any]]) -> None:
    data, expected = golden
    assert data[:4] == data[-4:] == OBJECT_MAGIC
    assert expected["format_version"] == expected["footer"]["version"] == FORMAT_VERSION
    kinds = {(c["topic"], c["partition"]): {b["compression"] for b in c["batches"]}
             for c in expected["chunks"]}
    assert kinds == {("events", 0): {"none"}, ("events", 1): {"gzip", "zstd"},
                     ("users", 0): {"none"}}
    users = expected["chunks"][2]
    assert users["offsets"] == [1, 3, 7, 10] and users["tombstones"] == [3, 10]  # holes


def test_the_reader_decodes_it_exactly(golden: tuple[bytes, dict[str, Any]]) -> None:
    data, expected = golden
    _fields(describe(data), expected, "golden")


def test_the_streamed_readers_agree(golden: tuple[bytes, dict[str, Any]]) -> None:
    data, expected = golden
    meta_offset, meta_length = expected["meta_offset"], expected["meta_length"]
    layout = verify_streams(io.BytesIO(data[meta_offset:]), io.BytesIO(data[:meta_offset]),
                            len(data), meta_offset)
    assert [(c.topic, c.partition, c.data_pos, c.frame_crc) for c in layout.chunks] == [
        (c["topic"], c["partition"], c["data_pos"], c["frame_crc"]) for c in expected["chunks"]]
    entries = list(iter_meta(io.BytesIO(data[meta_offset:meta_offset + meta_length]),
                             meta_offset, meta_length, expected_crc=expected["meta_crc"]))
    for (index, hashes), chunk in zip(entries, expected["chunks"], strict=True):
        assert (index.record_count, list(index.offsets)) == (chunk["record_count"],
                                                             chunk["offsets"])
        assert hashes.hex() == "".join(chunk["key_hashes"])


def test_the_writer_reproduces_it_byte_for_byte(golden: tuple[bytes, dict[str, Any]]) -> None:
    data, expected = golden
    assert write_object(inputs(expected)) == data
