"""Type stubs of the compiled module (fileformat/_native.c)."""

from collections.abc import Sequence
from typing import Any

ABI: int
"""The compiled module is built and matches the sources' ABI (a stale build is refused)."""

def crc32c(data: Any, crc: int = 0, /) -> int:
    """CRC32C of a bytes-like `data`, continued from `crc`."""

def crc32c_portable(data: Any, crc: int = 0, /) -> int:
    """`crc32c` by the table path whatever the CPU (tests cover the fallback with it)."""

class BatchEncoder:
    """One uncompressed Kafka RecordBatch v2, built record by record."""

    @property
    def record_count(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def min_timestamp(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...

    def append(self, offset_delta: int, timestamp: int, key: Any, value: Any,
               headers: Sequence[tuple[str, Any]] = (), /) -> int: ...
    def finish(self, base_offset: int = 0, /) -> bytes: ...


# ---- filter (compaction walk)
def filter_records(
    batch: Any, start: int, mask: Any, /
) -> tuple[bytearray, int, int, int]:
    """The batch's header, then its records kept by `mask` (one byte per record, from
    `start`): (that bytearray, records kept, last kept offsetDelta, largest kept
    timestampDelta). Corrupt framing raises ValueError."""


# ---- validate (produce admission)
def validate_records(
    batch: Any, start: int, count: int, null_keys: bool, /
) -> tuple[int, list[int] | None]:
    """A producer's `count` uncompressed records from `start` walked: (largest
    timestampDelta, indexes of null-key records if `null_keys` else None). A bad record
    raises ValueError(kind, message): 1 framing, 2 offsetDelta, 3 count."""


def check_plain_batch(
    batch: Any, null_keys: bool, /
) -> tuple[int, int, int, int, int, int, int, int, int, int, int, int] | None:
    """Every produce check on a whole uncompressed client batch (not control, not
    LogAppendTime) in one call: its header's 12 fields (length the total size, maxTimestamp
    the records' real largest) if it passes them all, else None (the Python checks then
    say why, or accept a compressed batch)."""
