"""Transaction markers: Kafka's control batches (COMMIT / ABORT), built and read.

A marker is a RecordBatch v2 with the control and transactional attribute bits set, the
producer's id and epoch, baseSequence -1, and ONE record whose key is the control record
type and whose value is the end-transaction marker, as Kafka's `EndTransactionMarker` and
`ControlRecordType` encode them (clients and the log cleaner read them this way):

    key   = version int16 (0) | type int16 (0 ABORT, 1 COMMIT)
    value = version int16 (0) | coordinatorEpoch int32

Written by the transaction coordinator into every partition of an ending transaction; read
by the metadata commit (which transaction a marker ends), Fetch and the compactor.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from fileformat.batch import (
    ATTRIBUTES_FIELD,
    ATTRIBUTES_POS,
    CONTROL_MASK,
    HEADER,
    TRANSACTIONAL_MASK,
    BatchHeader,
    decode_batch,
    read_header,
    seal_crc,
)
from fileformat.encoder import build_batch
from fileformat.errors import CorruptDataError

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch


@dataclass(frozen=True, slots=True)
class Marker:
    """What a control batch says: which producer's transaction ended, and how."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def build_marker(producer_id: int, producer_epoch: int, *, commit: bool,
                 coordinator_epoch: int, timestamp_ms: int, base_offset: int = 0) -> bytes:
    """One control batch ending `producer_id`'s transaction (COMMIT or ABORT)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    out = bytearray(build_batch([(0, timestamp_ms, key, value, ())], base_offset=base_offset))
    fields = list(HEADER.unpack_from(out, 0))
    # attributes, producerId, producerEpoch, baseSequence (-1: markers carry no sequence)
    fields[5] = TRANSACTIONAL_MASK | CONTROL_MASK
    fields[9], fields[10], fields[11] = producer_id, producer_epoch, -1
    HEADER.pack_into(out, 0, *fields)
    seal_crc(out)
    return bytes(out)


def read_marker(batch: Any, header: BatchHeader | None = None) -> Marker:
    """The marker of one control batch; CorruptDataError when it is not a well-formed one."""
    header = header or read_header(batch)
    (attributes,) = ATTRIBUTES_FIELD.unpack_from(batch, ATTRIBUTES_POS)
    if not attributes & CONTROL_MASK:
        raise CorruptDataError("not a control batch")
    records = decode_batch(batch)
    if len(records) != 1 or records[0].key is None or len(records[0].key) < _KEY.size:
        raise CorruptDataError("a control batch holds one record with a 4-byte key")
    version, kind = _KEY.unpack_from(records[0].key)
    if version != 0 or kind not in (ABORT, COMMIT):
        raise CorruptDataError(f"unknown control record (version {version}, type {kind})")
    value = records[0].value
    epoch = _VALUE.unpack_from(value)[1] if value is not None and len(value) >= _VALUE.size else -1
    return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, epoch)
