"""A producer's batch is validated as Kafka validates a produce (check_client_batch): the C
records walk (`_native.validate_records`) and its pure-Python twin agree on every input,
valid or mutated, and every malformed kind is refused with its own error class (the one
that maps to Kafka's code), never a crash."""

from __future__ import annotations

import struct
from collections.abc import Callable

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fileformat import Compression, CorruptDataError, FormatError, build_batch
from fileformat.batch import (
    ATTRIBUTES_POS,
    CODEC_MASK,
    CONTROL_MASK,
    CRC_POS,
    HEADER,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
)
from fileformat.compression import MAX_DECOMPRESSED, compress
from fileformat.errors import (
    ControlBatchError,
    DecompressionError,
    InvalidBatchError,
    LogAppendTimeError,
    NullKeyRecordsError,
    OffsetDeltaError,
    OldMagicError,
    ProducerFieldsError,
    RecordCountError,
    RecordFramingError,
)
from fileformat.native import _native
from fileformat.validate import (
    RecordsValidation,
    _validate_records_native,
    _validate_records_py,
    check_client_batch,
)
from tests.fileformat.client_batches import (
    CODECS,
    aiokafka_batch,
    kafka_python_batch,
    sample_records,
)

Walk = Callable[..., object]


def _outcome(fn: Walk, *args: object, **kwargs: object) -> object:
    """What a walk returns, or (its error class, message): the twins must agree on it."""
    try:
        return fn(*args, **kwargs)
    except FormatError as exc:
        return type(exc), str(exc)


def _reseal(raw: bytes | bytearray, **fields: int) -> bytes:
    """`raw` with header fields (HEADER's names below) replaced and a valid CRC again."""
    names = ("base", "length", "epoch", "magic", "crc", "attributes", "last_offset_delta",
             "first_ts", "max_ts", "producer_id", "producer_epoch", "base_sequence", "count")
    values = dict(zip(names, HEADER.unpack_from(raw), strict=True))
    values.update(fields)
    out = bytearray(raw)
    HEADER.pack_into(out, 0, *values.values())
    struct.pack_into(">I", out, CRC_POS, crc32c.crc32c(bytes(out[ATTRIBUTES_POS:])))
    return bytes(out)


def _records_replaced(raw: bytes, section: bytes, **fields: int) -> bytes:
    """`raw`'s header over another records section, length and CRC made right."""
    out = bytearray(raw[:HEADER_SIZE]) + section
    return _reseal(out, length=len(out) - 12, **fields)


RECORDS = st.lists(
    st.tuples(st.integers(-(2**40), 2**40), st.none() | st.binary(max_size=20),
              st.none() | st.binary(max_size=40),
              st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)),
                       max_size=3)),
    min_size=1, max_size=8)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(records=RECORDS, edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                       max_size=4),
       cut=st.integers(0, 10_000), count_shift=st.integers(-2, 2), null_keys=st.booleans())
def test_c_and_python_walks_agree_on_mutated_batches(
        records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
        edits: list[tuple[int, int]], cut: int, count_shift: int, null_keys: bool) -> None:
    """Random byte edits, truncations and wrong counts of valid batches: both walks return
    the same thing or raise the same class with the same message, and the valid batch
    walks to its records' largest timestamp delta and null-key indexes."""
    raw = build_batch([(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)])
    count = len(records)
    good = _outcome(_validate_records_native, raw, HEADER_SIZE, count, null_keys)
    first = records[0][0]
    assert good == (max(ts - first for ts, *_ in records),
                    [i for i, r in enumerate(records) if r[1] is None] if null_keys else None)
    assert good == _outcome(_validate_records_py, raw, HEADER_SIZE, count, null_keys)
    bad = bytearray(raw)
    for at, byte in edits:
        bad[HEADER_SIZE + at % (len(raw) - HEADER_SIZE)] = byte
    bad = bad[:max(HEADER_SIZE, len(bad) - cut % 8)] if cut % 3 == 0 else bad
    n = max(0, count + count_shift)
    assert (_outcome(_validate_records_native, bytes(bad), HEADER_SIZE, n, null_keys)
            == _outcome(_validate_records_py, bytes(bad), HEADER_SIZE, n, null_keys))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 30), codec=st.sampled_from((Compression.NONE, *CODECS)),
       builder=st.sampled_from(("aiokafka", "kafka-python")), data=st.data())
def test_client_batches_pass_and_their_mutations_never_crash(
        n: int, codec: Compression, builder: str, data: st.DataObject) -> None:
    """Batches built by aiokafka's and kafka-python's own builders pass as they are; with a
    byte of the (compressed) records section changed and the CRC made right again, both
    walks agree and any refusal is a FormatError."""
    if builder == "kafka-python" and codec in (Compression.SNAPPY, Compression.LZ4):
        codec = Compression.GZIP  # its snappy and lz4 need packages siltstream lacks
    make = aiokafka_batch if builder == "aiokafka" else kafka_python_batch
    raw = make(sample_records(n), codec)
    header, _ = check_client_batch(raw, False)
    assert header.record_count == n
    at = data.draw(st.integers(HEADER_SIZE, len(raw) - 1))
    bad = bytearray(raw)
    bad[at] ^= data.draw(st.integers(1, 255))
    resealed = _reseal(bad)
    outcomes = [_outcome(check_client_batch, resealed, True, null_keys=True, walk=walk)
                for walk in (_validate_records_native, _validate_records_py)]
    assert outcomes[0] == outcomes[1]


def _checked(raw: bytes, null_keys: bool, walk: RecordsValidation) -> object:
    """`check_client_batch`'s header, or (its error class, message). With the Python walk
    it makes its checks in Python only (the one-call fast path needs the C walk)."""
    try:
        return check_client_batch(raw, False, null_keys=null_keys, walk=walk)[0]
    except FormatError as exc:
        return type(exc), str(exc)


_NOT_PLAIN = CODEC_MASK | TIMESTAMP_TYPE_MASK | CONTROL_MASK


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(records=RECORDS, edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                       max_size=4),
       cut=st.integers(0, 10_000), reseal=st.booleans(), null_keys=st.booleans(),
       attributes=st.sampled_from((0, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, CONTROL_MASK)),
       producer=st.sampled_from(((-1, -1, -1), (7, 0, 0), (7, -1, 0), (7, 0, -1))))
def test_the_one_call_check_agrees_with_the_python_checks(
        records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
        edits: list[tuple[int, int]], cut: int, reseal: bool, null_keys: bool,
        attributes: int, producer: tuple[int, int, int]) -> None:
    """`_native.check_plain_batch` (every check of an uncompressed batch in one C call)
    accepts exactly the batches the Python checks accept, with the same header, and leaves
    every other batch to them (None): valid batches and their byte edits (header
    included), truncations, producer fields, attributes, CRCs made right again or not."""
    raw = build_batch([(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(records)])
    pid, epoch, sequence = producer
    bad = bytearray(_reseal(raw, attributes=attributes, producer_id=pid,
                            producer_epoch=epoch, base_sequence=sequence))
    for at, byte in edits:
        bad[at % len(bad)] = byte
    bad = bad[:len(bad) - cut % 8] if cut % 3 == 0 else bad
    if reseal and len(bad) >= HEADER_SIZE:
        bad = bytearray(_reseal(bad))
    fast = _native.check_plain_batch(bytes(bad), null_keys)
    slow = _checked(bytes(bad), null_keys, _validate_records_py)
    assert _checked(bytes(bad), null_keys, _validate_records_native) == slow
    if fast is not None:
        assert BatchHeader._make(fast) == slow
    elif isinstance(slow, BatchHeader):
        assert slow.attributes & _NOT_PLAIN  # only what the one call leaves to Python


GOOD = build_batch([(0, 10, b"k", b"v", [("h", b"x")]), (1, 12, b"k2", b"w", [])])
SECTION = GOOD[HEADER_SIZE:]
REC0 = SECTION[:SECTION[0] // 2 + 1]  # the first record (its 1-byte length prefix included)
REC1 = SECTION[len(REC0):]


def _zigzag(v: int) -> bytes:
    z, out = (v << 1) ^ (v >> 63), bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _record(body: bytes) -> bytes:
    return _zigzag(len(body)) + body


def _body(*, delta: int = 0, key: bytes = _zigzag(1) + b"k", value: bytes = _zigzag(1) + b"v",
          headers: bytes = _zigzag(0)) -> bytes:
    return b"\x00" + _zigzag(0) + _zigzag(delta) + key + value + headers


ONE = build_batch([(0, 10, b"k", b"v", [])])


def _one(body: bytes, **fields: int) -> bytes:
    """ONE's header over a single record of `body`."""
    return _records_replaced(ONE, _record(body), **fields)


def _compressed(codec: Compression, blob: bytes) -> bytes:
    return _records_replaced(ONE, blob, attributes=int(codec))


# The malformed kinds (and the producer-field ones), each with the error class that
# answers it: CorruptDataError -> CORRUPT_MESSAGE, InvalidBatchError -> INVALID_RECORD.
MALFORMED: dict[str, tuple[bytes, type[FormatError]]] = {
    "count 2**31-1": (_reseal(GOOD, count=2**31 - 1, last_offset_delta=2**31 - 2),
                      RecordCountError),
    "count 10**6": (_reseal(GOOD, count=10**6, last_offset_delta=10**6 - 1), RecordCountError),
    "count 2**31-1 lod 1": (_reseal(GOOD, count=2**31 - 1), RecordCountError),
    "lastOffsetDelta 2**31-1": (_reseal(GOOD, last_offset_delta=2**31 - 1), RecordCountError),
    "count 0": (_reseal(GOOD, count=0, last_offset_delta=-1), RecordCountError),
    "count -1": (_reseal(GOOD, count=-1), RecordCountError),
    "extra record": (_records_replaced(GOOD, SECTION + REC1), RecordCountError),
    "missing record": (_records_replaced(GOOD, REC0), RecordCountError),
    "trailing bytes": (_records_replaced(GOOD, SECTION + b"\x00"), RecordCountError),
    "negative record length": (_records_replaced(GOOD, _zigzag(-5) + SECTION[1:]),
                               RecordFramingError),
    "record length past end": (_records_replaced(GOOD, _zigzag(200) + SECTION[1:]),
                               RecordFramingError),
    "negative key length": (_one(_body(key=_zigzag(-2))), RecordFramingError),
    "negative value length": (_one(_body(value=_zigzag(-7))), RecordFramingError),
    "negative header count": (_one(_body(headers=_zigzag(-1))), RecordFramingError),
    "negative header key length": (_one(_body(headers=_zigzag(1) + _zigzag(-1) + _zigzag(-1))),
                                   RecordFramingError),
    "header value length < -1": (_one(_body(headers=_zigzag(1) + _zigzag(1) + b"h"
                                            + _zigzag(-3))), RecordFramingError),
    "record longer than its fields": (_one(_body() + b"\x00"), RecordFramingError),
    "offset delta 5": (_one(_body(delta=5)), OffsetDeltaError),
    "offset delta -1": (_one(_body(delta=-1)), OffsetDeltaError),
    "gzip garbage": (_compressed(Compression.GZIP, b"\x1f\x8b garbage" * 3), DecompressionError),
    "snappy garbage": (_compressed(Compression.SNAPPY, b"\xff" * 20), DecompressionError),
    "lz4 garbage": (_compressed(Compression.LZ4, b"\x04\x22\x4d\x18garbage"),
                    DecompressionError),
    "zstd garbage": (_compressed(Compression.ZSTD, b"\x28\xb5\x2f\xfdgarbage"),
                     DecompressionError),
    "gzip truncated": (_compressed(Compression.GZIP, compress(SECTION, Compression.GZIP)[:-9]),
                       DecompressionError),
    "zstd truncated": (_compressed(Compression.ZSTD, compress(SECTION, Compression.ZSTD)[:-4]),
                       DecompressionError),
    "lz4 truncated": (_compressed(Compression.LZ4, compress(SECTION, Compression.LZ4)[:-6]),
                      DecompressionError),
    "snappy truncated": (_compressed(Compression.SNAPPY,
                                     compress(SECTION, Compression.SNAPPY)[:-3]),
                         DecompressionError),
    "gzip of too few records": (_records_replaced(GOOD, compress(REC0, Compression.GZIP),
                                                  attributes=int(Compression.GZIP)),
                                RecordCountError),
    "idempotent sequence -1": (_reseal(GOOD, producer_id=7, producer_epoch=0,
                                       base_sequence=-1), ProducerFieldsError),
    "idempotent epoch -1": (_reseal(GOOD, producer_id=7, producer_epoch=-1, base_sequence=0),
                            ProducerFieldsError),
    "magic 1": (_reseal(GOOD, magic=1), OldMagicError),
    "magic 3": (_reseal(GOOD, magic=3), CorruptDataError),
    "control batch": (_reseal(GOOD, attributes=0x20), ControlBatchError),
    "bad crc": (GOOD[:-1] + bytes([GOOD[-1] ^ 1]), CorruptDataError),
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_each_malformed_kind_is_refused_with_its_error(kind: str) -> None:
    raw, error = MALFORMED[kind]
    for walk in (_validate_records_native, _validate_records_py):
        with pytest.raises(error) as caught:
            check_client_batch(raw, False, walk=walk)
        assert type(caught.value) is error  # exactly this condition's class
    if error is CorruptDataError or error is DecompressionError:
        assert not isinstance(caught.value, InvalidBatchError)


def test_per_record_errors_name_the_bad_records() -> None:
    """A compacted topic's null keys are listed by index (KIP-467), as librdkafka's test
    0011 expects: exactly the 10 keyless records of 100; a producer's LogAppendTime is
    refused for every record (Kafka: INVALID_TIMESTAMP)."""
    raw = build_batch([(i, i, None if i % 10 == 0 else b"k", b"v", []) for i in range(100)],
                      compression=Compression.LZ4)
    check_client_batch(raw, True)  # no rule against null keys unless asked
    with pytest.raises(NullKeyRecordsError) as caught:
        check_client_batch(raw, True, null_keys=True)
    assert [i for i, _ in caught.value.record_errors] == list(range(0, 100, 10))
    with pytest.raises(LogAppendTimeError) as timed:
        check_client_batch(_reseal(GOOD, attributes=TIMESTAMP_TYPE_MASK), False)
    assert [i for i, _ in timed.value.record_errors] == [0, 1]


def test_max_timestamp_is_taken_from_the_records() -> None:
    """A header whose maxTimestamp lies is not refused (Kafka rewrites it): the checked
    header carries the records' largest timestamp, which the chunk's time index takes."""
    header, _ = check_client_batch(_reseal(GOOD, max_ts=99), False)
    assert header.max_timestamp == 12


@pytest.mark.parametrize("base", [-(2**62), -1, 0, 7, 2**62])
def test_any_base_offset_a_producer_sends_is_taken(base: int) -> None:
    """Kafka assigns a produced batch's offsets whatever baseOffset the producer wrote
    (LogValidator checks lastOffset - baseOffset + 1 only, which does not depend on it), so
    neither is one refused here, a compacted topic's decoded batch included (its records'
    offsets were once compared with -1: a negative baseOffset was "not rising")."""
    raw = _reseal(GOOD, base=base)
    header, records = check_client_batch(raw, True, null_keys=True)
    assert header.base_offset == base
    assert records == [(0, 10, False, b"k"), (1, 12, False, b"k2")]
    assert check_client_batch(raw, False)[0] == header


def test_decompression_is_bounded_by_the_callers_limit() -> None:
    """A bomb stops at the limit the caller gives (the agent's is tied to max.message.bytes),
    refused as DecompressionError without the whole expansion being made."""
    raw = build_batch([(0, 1, b"k", b"\0" * (4 << 20), [])], compression=Compression.ZSTD)
    assert len(raw) < 4096
    check_client_batch(raw, False)
    with pytest.raises(DecompressionError, match="more than"):
        check_client_batch(raw, False, limit=1 << 20)
    assert MAX_DECOMPRESSED >= 1 << 20
