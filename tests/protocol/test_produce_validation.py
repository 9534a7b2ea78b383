"""Produce validation through a real `silt agent`: every malformed batch kind is refused
with Kafka's code and stores nothing, a compacted topic's keyless records are named by index
(KIP-467) as librdkafka's test 0011 expects, and one client's bad batch never fails another
client's produce in the same flush."""

from __future__ import annotations

import struct
import threading
from typing import Any

import crc32c
from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode

from fileformat import build_batch
from fileformat.batch import ATTRIBUTES_POS, CRC_POS, HEADER
from fileformat.errors import InvalidBatchError
from tests.fileformat.test_validate_batch import MALFORMED

from .server import AgentProcess, Backend, RawClient
from .test_raw import list_offset, produce_v9

GOOD = build_batch([(i, 1_000 + i, b"k", b"v" * 10, []) for i in range(3)])


def test_malformed_batches_are_refused_with_kafkas_code_and_store_nothing(
        agent_proc: AgentProcess) -> None:
    """Each kind (the issue's 21 and the producer-field ones) in its own partition of one
    request, next to a good batch: CORRUPT_MESSAGE for CRC, batch framing and undecodable
    compression, INVALID_RECORD for what Kafka's LogValidator and record reader refuse;
    no bad partition's log end moves, the good partition's records are acked."""
    kinds = list(MALFORMED)
    md = agent_proc.metadata()
    md.create_topic("bad", len(kinds))
    md.create_topic("good", 1)
    md.close()
    client = RawClient(agent_proc.port)
    try:
        parts = {("bad", i): MALFORMED[k][0] for i, k in enumerate(kinds)}
        result = produce_v9(client, {**parts, ("good", 0): GOOD})
        assert (int(result[("good", 0)].error_code), int(result[("good", 0)].base_offset)) == (
            0, 0)
        for i, kind in enumerate(kinds):
            error = MALFORMED[kind][1]
            want = (ErrorCode.invalid_record if issubclass(error, InvalidBatchError)
                    else ErrorCode.corrupt_message)
            got = result[("bad", i)]
            assert (kind, got.error_code, int(got.base_offset)) == (kind, want, -1)
        for i in range(len(kinds)):
            assert list_offset(client, "bad", i, -1)[:2] == (ErrorCode.none, 0)
        assert list_offset(client, "good", 0, -1)[:2] == (ErrorCode.none, 3)
    finally:
        client.close()


def test_null_keys_of_a_compacted_topic_are_named_by_index(agent_proc: AgentProcess) -> None:
    """librdkafka's test 0011 (test_message_single_partition_record_fail, variation 0): 100
    records in one batch to a compacted topic, every 10th without a key: exactly those 10
    fail with INVALID_RECORD, the other 90 with _INVALID_DIFFERENT_RECORD (KIP-467
    record_errors), and nothing is stored. The raw response names the indexes too."""
    md = agent_proc.metadata()
    md.create_topic("compact", 1, {"cleanup.policy": "compact"})
    md.close()
    errors: list[int] = []
    # One batch of the 100, however slow the loop: sent once the 100th is queued (a batch
    # full), never at a linger that could expire mid-loop and split it.
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{agent_proc.port}",
                         "linger.ms": 30_000, "batch.num.messages": 100, "acks": "all"})
    for i in range(100):
        producer.produce("compact", value=b"m%d" % i, key=None if i % 10 == 0 else b"k%d" % i,
                         partition=0,
                         on_delivery=lambda err, _msg: errors.append(err.code() if err else 0))
    assert producer.flush(60) == 0
    assert sorted(errors) == sorted([KafkaError.INVALID_RECORD] * 10
                                    + [KafkaError._INVALID_DIFFERENT_RECORD] * 90)
    client = RawClient(agent_proc.port)
    try:
        raw = build_batch([(i, i, None if i % 10 == 0 else b"k", b"v", []) for i in range(100)])
        got = produce_v9(client, {("compact", 0): raw})[("compact", 0)]
        assert got.error_code == ErrorCode.invalid_record
        assert [int(e.batch_index) for e in got.record_errors] == list(range(0, 100, 10))
        assert got.error_message and "10 record errors" in got.error_message
        assert list_offset(client, "compact", 0, -1)[:2] == (ErrorCode.none, 0)
    finally:
        client.close()


def _idempotent(raw: bytes, producer_id: int, sequence: int) -> bytes:
    out = bytearray(raw)
    fields = list(HEADER.unpack_from(out))
    fields[9:12] = [producer_id, 0, sequence]
    HEADER.pack_into(out, 0, *fields)
    struct.pack_into(">I", out, CRC_POS, crc32c.crc32c(bytes(out[ATTRIBUTES_POS:])))
    return bytes(out)


def test_a_bad_producer_never_fails_a_good_one_in_the_same_flush(backend: Backend) -> None:
    """Two clients produce within one flush (a 1.5 s linger): an idempotent batch with
    baseSequence -1 (the issue's: it used to fail the whole flush, `sequence out of range
    ... nothing committed`, and the other client got KAFKA_STORAGE_ERROR) and a good
    idempotent batch on another partition. The bad one gets INVALID_RECORD, the good one is
    stored; against SQLite and PostgreSQL."""
    md = backend.metadata()
    md.create_topic("t", 2)
    good_pid, bad_pid = md.allocate_producer_id(), md.allocate_producer_id()
    md.close()
    agent = backend.agent("a", {"SILT_AGENT_LINGER_MS": "1500"}).start()
    try:
        results: dict[str, Any] = {}

        def send(name: str, tp: tuple[str, int], raw: bytes) -> None:
            client = RawClient(agent.port)
            try:
                results[name] = produce_v9(client, {tp: raw})[tp]
            finally:
                client.close()

        threads = [threading.Thread(target=send, args=("bad", ("t", 0),
                                                        _idempotent(GOOD, bad_pid, -1))),
                   threading.Thread(target=send, args=("good", ("t", 1),
                                                        _idempotent(GOOD, good_pid, 0)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results["bad"].error_code == ErrorCode.invalid_record
        assert (results["good"].error_code, int(results["good"].base_offset)) == (
            ErrorCode.none, 0)
        client = RawClient(agent.port)
        try:
            assert list_offset(client, "t", 0, -1)[:2] == (ErrorCode.none, 0)
            assert list_offset(client, "t", 1, -1)[:2] == (ErrorCode.none, 3)
        finally:
            client.close()
    finally:
        agent.terminate()
