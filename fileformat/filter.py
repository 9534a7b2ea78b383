"""Filtering a verified batch record by record (what compaction keeps of it) without
decoding or re-encoding a record: `filter_batch` walks the records' length prefixes in C
(`_native.filter_records`), `filter_batch_reference` in its pure-Python twin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fileformat.batch import (
    CODEC_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    read_varint,
    seal_crc,
    uncompressed_view,
)
from fileformat.compression import Compression, compress
from fileformat.errors import CorruptDataError
from fileformat.native import _native

# What the records walk returns: (header of the input then the kept records' bytes, records
# kept, last kept offsetDelta, largest kept timestampDelta); the deltas are 0 if none kept.
FilteredRecords = tuple[bytearray, int, int, int]
RecordsWalk = Callable[[Any, int, Any], FilteredRecords]


def _filter_records_py(batch: Any, start: int, mask: Any) -> FilteredRecords:
    """Pure-Python twin of the C `_native.filter_records` (same contract, same errors):
    walk the length prefix of the len(mask) records from `start` to the end of `batch`,
    which they must frame exactly, and copy the records whose mask byte is non-zero."""
    buf = bytes(batch)
    keep = bytes(mask)
    end = len(buf)
    out = bytearray(buf[:start])
    pos = start
    kept = last_delta = max_ts = 0
    for i, flag in enumerate(keep):
        at = pos
        size, pos = read_varint(buf, pos, end)
        if size < 0 or size > end - pos:
            raise CorruptDataError(f"record {i}: length is negative or runs past the batch")
        rec_end = pos + size
        if flag:
            if pos + 1 > rec_end:
                raise CorruptDataError(f"record {i}: no attributes byte")
            ts, q = read_varint(buf, pos + 1, rec_end)
            last_delta = read_varint(buf, q, rec_end)[0]
            max_ts = ts if kept == 0 else max(max_ts, ts)
            kept += 1
            out += buf[at:rec_end]
        pos = rec_end
    if pos != end:
        raise CorruptDataError(f"{len(keep)} records do not frame the records section")
    return out, kept, last_delta, max_ts


def _filter_records_native(batch: Any, start: int, mask: Any) -> FilteredRecords:
    """`_native.filter_records`, its ValueError (corrupt framing) as CorruptDataError."""
    try:
        return _native.filter_records(batch, start, mask)
    except ValueError as exc:
        raise CorruptDataError(str(exc)) from None


def filter_batch(
    view: memoryview,
    header: BatchHeader,
    keep: Any,
    *,
    compression: Compression = Compression.NONE,
    base_offset: int | None = None,
    walk: RecordsWalk = _filter_records_native,
) -> bytearray:
    """A copy of a VERIFIED batch holding only the records whose `keep` mask entry is set
    (bytes-like, one byte per record: bytes or a contiguous numpy bool array; at least one
    set).

    The kept records' bytes are copied as they are (no decode, no re-encode): the copy
    keeps the batch's baseOffset (or gets `base_offset`: where it is placed) and
    firstTimestamp, against which every record's offset and timestamp deltas are stored,
    so offsets and timestamps are unchanged (relative to the base). The header
    gets the new record count, the last kept record's offset delta, the kept records'
    largest timestamp (unless LogAppendTime), the codec `compression` and a new CRC;
    producer id, epoch, sequence and leader epoch are kept. The walk over every record's
    length prefix and the copy run in C (`_native.filter_records`), or in `walk`.
    """
    mask = memoryview(keep)  # a bytes-like mask; TypeError for anything else
    if mask.nbytes != header.record_count:
        raise ValueError(f"keep mask of {mask.nbytes} bytes for a batch of "
                         f"{header.record_count} records")
    out, kept, last_delta, max_delta = walk(uncompressed_view(view, header), HEADER_SIZE, mask)
    if not kept:
        raise ValueError("a batch needs at least one record")
    if last_delta > header.last_offset_delta or last_delta < 0:
        raise CorruptDataError(f"batch at offset {header.base_offset}: record offset delta "
                               f"{last_delta} outside the batch")
    if compression != Compression.NONE:
        records = compress(memoryview(out)[HEADER_SIZE:], compression)
        del out[HEADER_SIZE:]
        out += records
    max_ts = (header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK
              else header.first_timestamp + max_delta)
    HEADER.pack_into(
        out, 0, header.base_offset if base_offset is None else base_offset,
        len(out) - LOG_OVERHEAD, header.leader_epoch, MAGIC, 0,
        (header.attributes & ~CODEC_MASK) | int(compression), last_delta,
        header.first_timestamp, max_ts, header.producer_id, header.producer_epoch,
        header.base_sequence, kept,
    )
    seal_crc(out)
    return out


filter_batch_reference = functools.partial(filter_batch, walk=_filter_records_py)
"""`filter_batch` with the records walk in pure Python: what tests hold the C to."""
