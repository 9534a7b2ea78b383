"""Type stubs of the compiled module (fileformat/_native.c)."""

from collections.abc import Sequence
from typing import Any

ABI: int
"""The compiled module is built and matches the sources' ABI (a stale build is refused)."""

def crc32c(data: Any, crc: int = 0, /) -> int:
    """CRC32C of a bytes-like `data`, continued from `crc`."""

class BatchEncoder:
    """One uncompressed Kafka RecordBatch v2, built record by record."""

    record_count: int
    size: int
    min_timestamp: int
    max_timestamp: int
    last_offset_delta: int

    def append(self, offset_delta: int, timestamp: int, key: Any, value: Any,
               headers: Sequence[tuple[str, Any]] = (), /) -> int: ...
    def finish(self, base_offset: int = 0, /) -> bytes: ...
