"""The produce rules one record must pass before it is buffered, as a Kafka broker checks a
produced record: its partition within the topic's count, a key on a compacted topic, its
size within the topic's max.message.bytes. Defined once, here: `Agent.produce` (whose hot
path asks `check_record` once a cheap test says a rule fails) and the Spark writer
(`format("silt")`) apply them. A ready-made batch is checked by
`fileformat.batch.check_client_batch` and `Agent._check_batch` instead."""

from __future__ import annotations

from collections.abc import Sequence

from metadata import TopicInfo

from .errors import NullKeyError, PartitionOutOfRangeError, RecordTooLargeError

# Per-record overhead in the size accounting (varints, attributes, headers framing).
RECORD_OVERHEAD = 24
HEADER_OVERHEAD = 8


def record_size(key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes | None]] = ()) -> int:
    """A record's size as max.message.bytes and buffer.memory count it."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        size += sum(len(k) + (len(v) if v else 0) + HEADER_OVERHEAD for k, v in headers)
    return size


def check_partition(info: TopicInfo, partition: int) -> None:
    """PartitionOutOfRangeError unless the topic has `partition`."""
    if not 0 <= partition < info.partitions:
        raise PartitionOutOfRangeError(
            f"partition {partition} out of range for topic {info.name!r}"
            f" (0..{info.partitions - 1})"
        )


def check_record(info: TopicInfo, partition: int, key: bytes | None, size: int) -> None:
    """Raise the first rule the record (of `record_size` bytes) breaks: the partition out of
    range (PartitionOutOfRangeError), no key on a compacted topic (NullKeyError), larger
    than max.message.bytes (RecordTooLargeError)."""
    check_partition(info, partition)
    if key is None and info.config.compacted:
        raise NullKeyError(
            f"topic {info.name!r} is compacted: records must have a key (Kafka rejects null keys)"
        )
    if size > info.config.max_message_bytes:
        raise RecordTooLargeError(
            f"record of {size} bytes exceeds max.message.bytes={info.config.max_message_bytes}"
            f" of topic {info.name!r}"
        )
