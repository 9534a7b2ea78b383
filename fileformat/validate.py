"""The checks a producer's batch gets before it is buffered, as Kafka's produce path makes
them (`check_client_batch`); the records walk runs in C (`_native.validate_records`), its
pure-Python twin is `_validate_records_py`. The batch most produces carry (uncompressed,
neither control nor LogAppendTime, not decoded) gets every check in one C call
(`_native.check_plain_batch`), whose twin is the Python checks themselves: it accepts only
what they accept and leaves everything else to them, which then name the error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import crc32c

from fileformat.batch import (
    ATTRIBUTES_POS,
    CODEC_MASK,
    HEADER,
    HEADER_SIZE,
    LENGTH_FIELD,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_POS,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    batch_offsets,
    check_batch,
    read_header,
    read_varint,
    uncompressed_view,
)
from fileformat.errors import (
    ControlBatchError,
    CorruptDataError,
    LogAppendTimeError,
    NullKeyRecordsError,
    OffsetDeltaError,
    OldMagicError,
    ProducerFieldsError,
    RecordCountError,
    RecordFramingError,
)
from fileformat.native import _native


def _varint32(buf: Any, pos: int, end: int, what: str, i: int) -> tuple[int, int]:
    """Kafka's int32 zigzag varint (ByteUtils.readVarint) at `pos`: at most 5 bytes, the
    5th without its continuation bit, bits past 32 dropped; RecordFramingError saying
    `what` for record `i` if it runs to `end` or past 5 bytes."""
    raw = 0
    for shift in range(0, 35, 7):
        if pos >= end:
            break
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), pos
    raise RecordFramingError(f"record {i}: {what}")


_BLOB = "key or value length below -1 or past the record"
_HEADER = "header key or value length is invalid or past the record"


def _blob(buf: Any, pos: int, end: int, nullable: bool, what: str, i: int) -> tuple[int, int]:
    """A length (-1: null if `nullable`) and its bytes inside `end`: (length, position after)."""
    size, pos = _varint32(buf, pos, end, what, i)
    if size < (-1 if nullable else 0) or size > end - pos:
        raise RecordFramingError(f"record {i}: {what}")
    return size, pos + max(size, 0)


def _validate_records_py(batch: Any, start: int, count: int,
                         null_keys: bool) -> tuple[int, list[int] | None]:
    """Pure-Python twin of the C `_native.validate_records` (same contract, same errors and
    messages): walk a producer's `count` uncompressed records from `start` as Kafka's
    DefaultRecord.readFrom does, each framed exactly with offsetDelta = its index, the
    records filling the section; (largest timestampDelta, null-key indexes or None)."""
    buf = bytes(batch)
    end, pos = len(buf), start
    max_ts = 0
    nulls: list[int] | None = [] if null_keys else None
    for i in range(count):
        if pos >= end:
            raise RecordCountError(f"record {i}: missing: the records section ends before"
                                   " the batch's record count")
        size, pos = _varint32(buf, pos, end, _LENGTH_PREFIX, i)
        if size < 0 or size > end - pos:
            raise RecordFramingError(f"record {i}: {_LENGTH_PREFIX}")
        rec_end = pos + size
        try:
            if pos + 1 > rec_end:
                raise CorruptDataError("no attributes byte")
            ts, q = read_varint(buf, pos + 1, rec_end)
        except CorruptDataError:
            raise RecordFramingError(f"record {i}: {_DELTAS}") from None
        delta, q = _varint32(buf, q, rec_end, _DELTAS, i)
        if delta != i:
            raise OffsetDeltaError(f"record {i}: offsetDelta is not the record's index")
        key_len, q = _blob(buf, q, rec_end, True, _BLOB, i)
        _, q = _blob(buf, q, rec_end, True, _BLOB, i)
        headers, q = _varint32(buf, q, rec_end, _HEADERS, i)
        if headers < 0 or headers > rec_end - q:
            raise RecordFramingError(f"record {i}: {_HEADERS}")
        for _ in range(headers):
            _, q = _blob(buf, q, rec_end, False, _HEADER, i)
            _, q = _blob(buf, q, rec_end, True, _HEADER, i)
        if q != rec_end:
            raise RecordFramingError(f"record {i}: fields do not fill the record's length"
                                     " exactly")
        max_ts = ts if i == 0 else max(max_ts, ts)
        if key_len < 0 and nulls is not None:
            nulls.append(i)
        pos = rec_end
    if pos != end:
        raise RecordCountError(f"record {count}: bytes remain after the batch's last record")
    return max_ts, nulls


_LENGTH_PREFIX = "length prefix is malformed, negative or runs past the batch"
_DELTAS = "timestamp or offset delta runs past the record"
_HEADERS = "header count is malformed, negative or past the record"
_VALIDATE_ERRORS: dict[int, type[CorruptDataError]] = {
    1: RecordFramingError, 2: OffsetDeltaError, 3: RecordCountError}
RecordsValidation = Callable[[Any, int, int, bool], tuple[int, "list[int] | None"]]


def _validate_records_native(batch: Any, start: int, count: int,
                             null_keys: bool) -> tuple[int, list[int] | None]:
    """`_native.validate_records`, its ValueError(kind, message) as the kind's class."""
    try:
        return _native.validate_records(batch, start, count, null_keys)
    except ValueError as exc:
        if len(exc.args) == 2 and exc.args[0] in _VALIDATE_ERRORS:
            raise _VALIDATE_ERRORS[exc.args[0]](exc.args[1]) from None
        raise


# A client's batch that passed `check_client_batch`: its header, and its records'
# (delta, timestamp, is_tombstone, key) if it was decoded.
CheckedBatch = tuple[BatchHeader, list[tuple[int, int, bool, bytes | None]] | None]
_I64 = 1 << 63


def check_client_batch(raw: Any, decode: bool, *, null_keys: bool = False,
                       limit: int | None = None, control: bool = False,
                       walk: RecordsValidation = _validate_records_native) -> CheckedBatch:
    """Every check a producer's batch gets before it is buffered, as Kafka's produce path
    makes them (ProduceRequest.validateRecords, UnifiedLog, LogValidator, DefaultRecordBatch
    and DefaultRecord; the Kafka exception each mirrors in brackets):

    - CorruptDataError [CorruptRecordException]: a magic other than 0-2, a length below
      the header's or not exactly `raw`, a bad CRC; DecompressionError (a CorruptDataError)
      for compressed records that do not decompress or exceed `limit` bytes.
    - UnsupportedError: codec ids 5-7.
    - InvalidBatchError subclasses [InvalidRecordException]: OldMagicError (0 or 1),
      ControlBatchError (unless `control`: the transaction coordinator's append, Kafka's
      AppendOrigin.COORDINATOR, whose markers carry no sequence), RecordCountError (count
      < 1, lastOffsetDelta != count - 1, records missing or extra), ProducerFieldsError
      (producerId >= 0 with a negative epoch, or baseSequence unless a control batch),
      RecordFramingError and OffsetDeltaError from the records walk
      (`_native.validate_records`, every record of the decompressed section: one C pass,
      nothing decoded into objects).
    - RecordErrorsError subclasses, per record (KIP-467): LogAppendTimeError
      [INVALID_TIMESTAMP] for a producer that set LogAppendTime, NullKeyRecordsError for
      null keys when `null_keys` (a compacted topic).

    The header returned carries the records' real largest timestamp (Kafka rewrites
    maxTimestamp; the index takes it, the bytes stay as sent), and the records
    (delta, timestamp, is_tombstone, key) when `decode`. A batch that passed cannot make
    `append_batch(raw, checked)` fail, so a caller checks all of its batches first and
    refuses a bad one before anything is buffered. Unless `decode` (or a walk other than
    the C one is given: the twins' tests), `_native.check_plain_batch` tries every check at
    once first (module docstring).
    """
    if not decode and walk is _validate_records_native:  # one C call: every check below
        fields = _native.check_plain_batch(raw, null_keys)
        if fields is not None:  # tuple.__new__: `_make` is a Python-level call
            return tuple.__new__(BatchHeader, fields), None
    if len(raw) > MAGIC_POS and raw[MAGIC_POS] in (0, 1):
        raise OldMagicError(f"batch magic {raw[MAGIC_POS]}: Produce carries magic 2 only")
    view = memoryview(raw)
    try:  # `verify_batch`, its two steps called straight (this runs for every batch)
        header = read_header(view)
        check_batch(view, header)
    except CorruptDataError:
        _negative_count(view)  # a good CRC over a negative count: Kafka's INVALID_RECORD
        raise
    if header.length != len(view):
        raise CorruptDataError(f"batch declares {header.length} bytes, got {len(view)}")
    if header.is_control and not control:
        raise ControlBatchError("clients may not write control batches")
    count = header.record_count
    if count < 1 or header.last_offset_delta != count - 1:
        raise RecordCountError(f"recordCount {count} with lastOffsetDelta "
                               f"{header.last_offset_delta}: need count >= 1 and "
                               "lastOffsetDelta = count - 1")
    if header.producer_id >= 0 and (header.producer_epoch < 0 or (
            header.base_sequence < 0 and not header.is_control)):
        raise ProducerFieldsError(f"producerId {header.producer_id} with baseSequence "
                                  f"{header.base_sequence} and epoch {header.producer_epoch}")
    plain = uncompressed_view(view, header, limit)
    max_delta, nulls = walk(plain, HEADER_SIZE, count, null_keys)
    if header.attributes & TIMESTAMP_TYPE_MASK:
        raise LogAppendTimeError(
            "producers may not set the LogAppendTime timestamp type",
            tuple((i, "Producer should not set timestamp type to LogAppendTime.")
                  for i in range(count)))
    if nulls:
        raise NullKeyRecordsError(
            f"{len(nulls)} of {count} records have no key (a compacted topic)",
            tuple((i, "Compacted topic cannot accept message without key") for i in nulls))
    max_ts = (header.first_timestamp + max_delta + _I64) % (2 * _I64) - _I64  # Java's wrap
    if max_ts != header.max_timestamp:
        header = header._replace(max_timestamp=max_ts)
    decoded = None
    if decode:
        plain_header = header._replace(attributes=header.attributes & ~CODEC_MASK,
                                       length=len(plain))
        decoded = batch_offsets(plain, plain_header)
    return header, decoded


def _negative_count(view: memoryview) -> None:
    """RecordCountError if `view` is a whole batch whose CRC holds and whose recordCount or
    lastOffsetDelta is negative (what `read_header` refuses as corrupt)."""
    if (len(view) < HEADER_SIZE
            or LENGTH_FIELD.unpack_from(view, LENGTH_POS)[0] + LOG_OVERHEAD != len(view)
            or view[MAGIC_POS] != MAGIC):
        return
    fields = HEADER.unpack_from(view)
    if crc32c.crc32c(view[ATTRIBUTES_POS:]) == fields[4] and (fields[12] < 0 or fields[6] < 0):
        raise RecordCountError(f"recordCount {fields[12]} with lastOffsetDelta {fields[6]}")
