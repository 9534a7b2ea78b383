"""Control batches as Kafka encodes them: attribute bits, producer fields, key and value."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from fileformat.batch import read_header, verify_batch
from fileformat.control import build_marker, read_marker
from fileformat.encoder import build_batch
from fileformat.errors import CorruptDataError


@pytest.mark.parametrize("commit", [True, False])
def test_marker_round_trip_and_kafka_layout(commit: bool) -> None:
    batch = build_marker(42, 3, commit=commit, coordinator_epoch=7, timestamp_ms=1_000,
                         base_offset=10)
    header = verify_batch(batch)  # CRC and framing hold
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    assert (header.base_offset, header.record_count, header.last_offset_delta) == (10, 1, 0)
    marker = read_marker(batch)
    assert (marker.producer_id, marker.producer_epoch) == (42, 3)
    assert marker.commit is commit and marker.coordinator_epoch == 7
    # A Kafka client's reader (aiokafka's) sees a control batch with that record.
    parsed = DefaultRecordBatch(bytearray(batch))
    assert parsed.is_control_batch and parsed.is_transactional
    (record,) = list(parsed)
    assert struct.unpack(">hh", record.key) == (0, 1 if commit else 0)
    assert struct.unpack(">hi", record.value) == (0, 7)


def test_a_data_batch_is_not_a_marker() -> None:
    batch = build_batch([(0, 1, b"k", b"v", ())])
    with pytest.raises(CorruptDataError):
        read_marker(batch, read_header(batch))
