"""Forward-only byte streams, as the object readers take them: `Readable` (an object-store
range GET body, a file, a BytesIO), `ReadAhead` over one section, and `read_exact`.
"""

from __future__ import annotations

from typing import Protocol

from fileformat.errors import TruncatedError

COPY_BLOCK = 1 << 20
"""Bytes moved per read when a reader copies or skips a stretch of a stream."""


class Readable(Protocol):
    """A forward-only byte stream (e.g. an object-store range GET body)."""

    def read(self, n: int, /) -> bytes: ...


class ReadAhead:
    """A Readable serving small reads (META entries: a few per chunk) from reads of at least
    `block` bytes of `stream`, which it may read up to its end: for a stream over exactly
    one section (a range GET), so each read need not be a call into the store."""

    def __init__(self, stream: Readable, block: int = COPY_BLOCK) -> None:
        self._stream = stream
        self._block = block
        self._buf = b""
        self._pos = 0

    def read(self, n: int, /) -> bytes:
        pos, buf = self._pos, self._buf
        if n <= len(buf) - pos:
            self._pos = pos + n
            return buf[pos : pos + n]
        parts = [buf[pos:]]
        want = n - len(parts[0])
        while want > 0:
            more = self._stream.read(max(want, self._block))
            if not more:
                break
            parts.append(more)
            want -= len(more)
        data = b"".join(parts)
        self._buf, self._pos = data, min(n, len(data))
        return data[:n]


def read_exact(stream: Readable, n: int, what: str) -> bytes:
    """Read exactly n bytes or raise TruncatedError."""
    data = stream.read(n)
    if len(data) == n:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = stream.read(n - got)
        if not more:
            raise TruncatedError(f"stream ended after {got} of {n} bytes of {what}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)
