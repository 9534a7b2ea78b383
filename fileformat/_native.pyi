"""Types of the compiled module fileformat._native (fileformat/_native.c); import it through
fileformat.native, which refuses a missing or stale build."""

from typing import Any

ABI: int

# ---- filter (compaction walk)
def filter_records(
    batch: Any, start: int, mask: Any, /
) -> tuple[bytearray, int, int, int]: ...
