"""Pass 1's bounded state: the compiled offset map and the spool of key hashes for pass 2.

`OffsetMap` (compactor/_offsetmap.c) maps a 16-byte key hash to the position of its key's
latest record (its ordinal among the partition's records in the job, ordered like offsets):
20 B per slot at load <= 0.9, grown up to `capacity` keys, never more than `capacity *
MAP_BYTES_PER_KEY` bytes even while it grows. `HashSpool` keeps every record's hash in
order for pass 2 (which needs them to look records up and to write survivors' hashes):
in memory up to a limit, then in an unnamed temporary file, so pass 1's memory is the map
plus that limit however many records the job holds.
"""

from __future__ import annotations

import tempfile
from typing import IO

from fileformat.native import check_built

ABI = 1
SPOOL_MEMORY = 8 << 20  # hash bytes kept in memory before the spool moves to a temp file

check_built("compactor._offsetmap", ABI)
from compactor import _offsetmap  # noqa: E402  (checked just above)

OffsetMap = _offsetmap.OffsetMap


class HashSpool:
    """Bytes written in order, then read back once in order: in memory up to `limit`
    bytes (default SPOOL_MEMORY), in an unnamed temporary file (deleted on close) beyond."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = SPOOL_MEMORY if limit is None else limit
        self._buf = bytearray()
        self._file: IO[bytes] | None = None
        self._read = 0  # bytes handed out of _buf
        self._reading = False
        self.size = 0

    @property
    def spilled(self) -> bool:
        """Whether the bytes went to a temporary file."""
        return self._file is not None

    def write(self, data: bytes | memoryview) -> None:
        if self._reading:
            raise RuntimeError("the spool is being read")
        self.size += len(data)
        if self._file is None and len(self._buf) + len(data) <= self._limit:
            self._buf += data
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="silt-hashes-")  # noqa: SIM115 (close())
            self._file.write(self._buf)
            self._buf = bytearray()
        self._file.write(data)

    def read(self, n: int) -> bytes:
        """The next `n` bytes (first call: start from the beginning)."""
        if not self._reading:
            self._reading = True
            if self._file is not None:
                self._file.seek(0)
        if self._file is not None:
            data = self._file.read(n)
        else:
            data = bytes(self._buf[self._read : self._read + n])
            self._read += len(data)
        if len(data) != n:
            raise RuntimeError(f"hash spool: {len(data)} of {n} bytes left")
        return data

    def close(self) -> None:
        self._buf = bytearray()
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> HashSpool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["ABI", "SPOOL_MEMORY", "HashSpool", "OffsetMap"]
