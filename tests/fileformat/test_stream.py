"""ReadAhead serves what the stream holds, whatever the read sizes and block."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from fileformat.stream import ReadAhead


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.lists(st.integers(0, 80), max_size=20), st.integers(1, 64))
def test_read_ahead_reads_what_the_stream_holds(data: bytes, sizes: list[int],
                                                block: int) -> None:
    ahead = ReadAhead(io.BytesIO(data), block)
    plain = io.BytesIO(data)
    for n in sizes:
        assert ahead.read(n) == plain.read(n)
