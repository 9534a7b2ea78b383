"""Per-tombstone first-cleaned times round-trip and are covered by the entry CRC."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fileformat import ChunkBuilder, CorruptDataError, build_batch, encode_file, iter_meta
from fileformat.objectfile import read_object


def _chunk(times: list[int]) -> tuple[bytes, list[int]]:
    n = len(times)
    records = [(i, 1000 + i, b"k%d" % i, None, ()) for i in range(n)]
    raw = build_batch(records)
    b = ChunkBuilder("t", 0, base_offset=0, keyed=True)
    b.append_compacted(raw, base=0, offsets=list(range(n)), tombstones=list(range(n)),
                       key_hashes=bytes(16 * n), tombstone_cleaned_at=times)
    data, _ = encode_file([b.finish()])
    return data, times


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**62), min_size=1, max_size=20))
def test_round_trip(times: list[int]) -> None:
    data, _ = _chunk(times)
    layout, entries = read_object(data)
    assert list(entries[0][0].tombstone_cleaned_at) == times
    stream = io.BytesIO(data[layout.meta_offset:])
    (ci, _), = list(iter_meta(stream, layout.meta_offset, layout.meta_length))
    assert np.array_equal(ci.tombstone_cleaned_at, np.array(times, dtype=np.int64))


def test_flipped_time_is_detected() -> None:
    data, _ = _chunk([123456789])
    layout, _ = read_object(data)
    pos = data.index((123456789).to_bytes(8, "big"), layout.meta_offset)
    bad = bytearray(data)
    bad[pos + 7] ^= 1
    with pytest.raises(CorruptDataError):
        read_object(bytes(bad))
