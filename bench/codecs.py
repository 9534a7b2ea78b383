"""Kafka protocol codec comparison: kio vs kafka-python 3.x `kafka.protocol`.

Decode of a 1 MiB Produce request (v9) and encode of a 1 MiB Fetch response (v12), 16
partitions of 64 KiB record batches each (what a busy producer sends and a consumer gets).
Both must produce identical bytes, or the comparison means nothing. The figure is CPU time
per operation on one core (`time.process_time`), best of a few rounds.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import response as kfetch
from kio.schema.produce.v9 import request as kproduce
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64

from fileformat import build_batch

PARTITIONS = 16
BATCH_BYTES = 64 * 1024
TOPIC = "bench"


def _batches() -> list[bytes]:
    """One ~64 KiB RecordBatch v2 per partition (64 records of 1 KiB)."""
    value = b"v" * (BATCH_BYTES // 64 - 40)
    return [build_batch([(i, 1_700_000_000_000 + i, b"k%d" % i, value, []) for i in range(64)])
            for _ in range(PARTITIONS)]


def kio_produce_request(batches: list[bytes]) -> bytes:
    """A Produce v9 request body encoded with kio."""
    req = kproduce.ProduceRequest(
        transactional_id=None, acks=i16(-1),
        timeout=i32Timedelta.parse(timedelta(milliseconds=30_000)),
        topic_data=(kproduce.TopicProduceData(name=TOPIC, partition_data=tuple(  # type: ignore[arg-type]
            kproduce.PartitionProduceData(index=i32(p), records=Records(b))
            for p, b in enumerate(batches))),),
    )
    buf = io.BytesIO()
    entity_writer(kproduce.ProduceRequest)(buf, req)
    return buf.getvalue()


def kio_fetch_response(batches: list[bytes]) -> kfetch.FetchResponse:
    """A Fetch v12 response as kio entities."""
    return kfetch.FetchResponse(
        throttle_time=i32Timedelta.parse(timedelta(0)), error_code=ErrorCode.none,
        responses=(kfetch.FetchableTopicResponse(topic=TOPIC, partitions=tuple(  # type: ignore[arg-type]
            kfetch.PartitionData(partition_index=i32(p), error_code=ErrorCode.none,
                                 high_watermark=i64(64), last_stable_offset=i64(64),
                                 log_start_offset=i64(0), aborted_transactions=(),
                                 records=Records(b))
            for p, b in enumerate(batches))),),
    )


def kp_fetch_response(batches: list[bytes]) -> Any:
    """The same Fetch v12 response as kafka-python objects."""
    from kafka.protocol.consumer.fetch import FetchResponse

    topic_cls = FetchResponse.FetchableTopicResponse
    part_cls = topic_cls.PartitionData
    return FetchResponse(
        version=12, throttle_time_ms=0, error_code=0, session_id=0,
        responses=[topic_cls(version=12, topic=TOPIC, partitions=[
            part_cls(version=12, partition_index=p, error_code=0, high_watermark=64,
                     last_stable_offset=64, log_start_offset=0, aborted_transactions=[],
                     preferred_read_replica=-1, records=b)
            for p, b in enumerate(batches)])],
    )


def _cpu_us(fn: Callable[[], object], rounds: int) -> float:
    """Best per-call CPU microseconds over 5 runs of `rounds` calls."""
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(rounds):
            fn()
        best = min(best, (time.process_time() - t0) / rounds)
    return round(best * 1e6, 1)


def run_codecs(quick: bool = False) -> list[dict[str, Any]]:
    """Per library: µs of CPU to decode the Produce request and to encode the Fetch response."""
    from kafka.protocol.consumer.fetch import FetchResponse
    from kafka.protocol.producer.produce import ProduceRequest

    rounds = 20 if quick else 200
    batches = _batches()
    produce = kio_produce_request(batches)
    kio_reader = entity_reader(kproduce.ProduceRequest)
    kio_writer = entity_writer(kfetch.FetchResponse)
    kio_resp = kio_fetch_response(batches)
    kp_resp = kp_fetch_response(batches)

    def kio_encode() -> bytes:
        buf = io.BytesIO()
        kio_writer(buf, kio_resp)
        return buf.getvalue()

    def kp_encode() -> bytes:
        return bytes(kp_resp.encode(version=12))

    # The two libraries must agree byte for byte, both ways.
    decoded_kio, _ = kio_reader(produce, 0)
    decoded_kp = ProduceRequest.decode(produce, version=9)
    assert [p.records for p in decoded_kio.topic_data[0].partition_data] == batches
    assert [bytes(p.records) for p in decoded_kp.topic_data[0].partition_data] == batches
    same = kio_encode() == kp_encode()
    assert FetchResponse.decode(kio_encode(), version=12).responses[0].partitions[0].records
    size_in, size_out = len(produce), len(kio_encode())
    return [
        {"benchmark": "codecs", "library": "kio", "produce_v9_bytes": size_in,
         "decode_produce_us": _cpu_us(lambda: kio_reader(produce, 0), rounds),
         "fetch_v12_bytes": size_out, "encode_fetch_us": _cpu_us(kio_encode, rounds),
         "identical_bytes": same},
        {"benchmark": "codecs", "library": "kafka-python", "produce_v9_bytes": size_in,
         "decode_produce_us": _cpu_us(lambda: ProduceRequest.decode(produce, version=9),
                                      rounds),
         "fetch_v12_bytes": size_out, "encode_fetch_us": _cpu_us(kp_encode, rounds),
         "identical_bytes": same},
    ]
