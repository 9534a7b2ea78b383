"""Exact protocol behaviour with a raw kio client: ApiVersions from the table, bad frames
closing one connection only, per-partition produce errors, fetch limits and offsets."""

from __future__ import annotations

import importlib
import socket
import struct
from datetime import timedelta
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions
from kio.schema.api_versions.v4 import request as av4
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as f12
from kio.schema.list_offsets.v7 import request as lo7
from kio.schema.metadata.v12 import request as m12
from kio.schema.produce.v9 import request as p9
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from agent.protocol.apis import TABLE
from fileformat import Compression, build_batch, read_header

from .server import AgentProcess, Backend, RawClient

Batch = list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(timedelta(milliseconds=ms))


def batch(n: int, *, ts: int = 1_000, key: bytes | None = b"k", size: int = 10) -> bytes:
    return build_batch([(i, ts + i, key, b"v" * size, []) for i in range(n)])


def produce_v9(client: RawClient, parts: dict[tuple[str, int], bytes]) -> dict[
        tuple[str, int], Any]:
    """Produce v9, acks=-1: the partition responses (error code, offset, record errors)."""
    topics: dict[str, list[Any]] = {}
    for (topic, p), records in parts.items():
        topics.setdefault(topic, []).append(
            p9.PartitionProduceData(index=i32(p), records=Records(records)))
    req = p9.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=_ms(30_000),
                            topic_data=tuple(
                                p9.TopicProduceData(name=TopicName(t), partition_data=tuple(ps))
                                for t, ps in topics.items()))
    resp = client.call(0, 9, req)
    return {(t.name, int(p.index)): p for t in resp.responses for p in t.partition_responses}


def produce(client: RawClient, parts: dict[tuple[str, int], bytes]) -> dict[tuple[str, int],
                                                                          tuple[int, int]]:
    """Produce v9, acks=-1: (error code, base offset) per partition."""
    return {tp: (int(p.error_code), int(p.base_offset))
            for tp, p in produce_v9(client, parts).items()}


def fetch(client: RawClient, topic: str, partition: int, offset: int, *, max_wait: int = 0,
          partition_max_bytes: int = 1 << 20, max_bytes: int = 50 << 20) -> Any:
    req = f12.FetchRequest(
        max_wait=_ms(max_wait), min_bytes=i32(1), max_bytes=i32(max_bytes),
        isolation_level=i8(0), topics=(f12.FetchTopic(topic=TopicName(topic), partitions=(
            f12.FetchPartition(partition=i32(partition), fetch_offset=i64(offset),
                               partition_max_bytes=i32(partition_max_bytes)),)),),
        forgotten_topics_data=())
    return client.call(1, 12, req).responses[0].partitions[0]


def batch_bases(records: bytes) -> list[tuple[int, int]]:
    """(base offset, leader epoch) of each batch in a fetched records field."""
    out, pos = [], 0
    while pos < len(records):
        h = read_header(records, pos)
        out.append((h.base_offset, h.leader_epoch))
        pos += h.length
    return out


def list_offset(client: RawClient, topic: str, partition: int, ts: int) -> tuple[int, int, int]:
    req = lo7.ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=(
        lo7.ListOffsetsTopic(name=TopicName(topic), partitions=(
            lo7.ListOffsetsPartition(partition_index=i32(partition), timestamp=i64(ts)),)),))
    p = client.call(2, 7, req).topics[0].partitions[0]
    return int(p.error_code), int(p.offset), int(p.timestamp)


@pytest.fixture
def client(agent_proc: AgentProcess) -> Any:
    c = RawClient(agent_proc.port)
    yield c
    c.close()


def test_api_versions_is_the_dispatch_table(client: RawClient) -> None:
    resp = client.call(18, 4, av4.ApiVersionsRequest(client_software_name="raw",
                                                     client_software_version="1"))
    assert resp.error_code == ErrorCode.none
    assert {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys} == {
        (a.key, a.min_version, a.max_version) for a in TABLE.values()}
    # a version the server does not support (v5: a v4 body under a v5 header, as a newer
    # client sends): the v0 error response, still listing the table
    frame = bytearray(client.frame(18, 4, av4.ApiVersionsRequest(
        client_software_name="raw", client_software_version="1")))
    struct.pack_into(">h", frame, 6, 5)  # after the size and the API key
    client.send_raw(bytes(frame))
    resp = client.receive(18, 0)
    assert resp.error_code == ErrorCode.unsupported_version
    assert (18, 0, 4) in {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys}


def test_tagged_fields_a_version_does_not_define_are_read_past(client: RawClient) -> None:
    """A newer client's tagged field (here tag 9 in ApiVersions v4's body and tag 5 in its
    request header, neither defined): answered as Kafka answers it, the connection kept."""
    frame = client.frame(18, 4, av4.ApiVersionsRequest(client_software_name="raw",
                                                       client_software_version="1"))
    assert frame.endswith(b"\x00")  # the body's empty tagged-field section, last
    head = frame.index(b"raw") + 3  # the header's, after its client id
    frame = (frame[:head] + b"\x01\x05\x01x" + frame[head + 1:-1] + b"\x01\x09\x03new")
    client.send_raw(struct.pack(">i", len(frame) - 4) + frame[4:])
    resp = client.receive(18, 4)
    assert resp.error_code == ErrorCode.none and len(resp.api_keys) == len(TABLE)
    assert client.call(18, 4, av4.ApiVersionsRequest(  # and the connection still serves
        client_software_name="raw", client_software_version="1")).error_code == ErrorCode.none


@pytest.mark.parametrize("bad", [
    struct.pack(">i", 100 * 1024 * 1024 + 1),                    # above socket.request.max.bytes
    struct.pack(">i", -5),                                       # negative size
    struct.pack(">ihhi", 8, 999, 0, 1),                          # unknown API key
    struct.pack(">ihhi", 8, 3, 99, 1),                           # unknown Metadata version
    struct.pack(">ihhi", 12, 3, 12, 1) + b"\xff\xff\xff\xff",    # undecodable header/body
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                        # garbage
], ids=["oversize", "negative", "unknown-key", "unknown-version", "undecodable", "http"])
def test_bad_input_closes_that_connection_only(agent_proc: AgentProcess, client: RawClient,
                                               bad: bytes) -> None:
    other = RawClient(agent_proc.port)
    other.send_raw(bad)
    assert other.closed_by_server()
    other.close()
    # a truncated frame: the size promises more than the client sends before closing
    with socket.create_connection(("127.0.0.1", agent_proc.port)) as trunc:
        trunc.sendall(struct.pack(">i", 100) + b"0123456789")
        trunc.shutdown(socket.SHUT_WR)
        assert trunc.recv(1) == b""
    # the connection opened before is served as if nothing happened
    assert client.call(3, 12, m12.MetadataRequest(
        topics=None, include_topic_authorized_operations=False)).brokers[0].port == agent_proc.port


def test_produce_errors_are_per_partition_and_store_nothing(agent_proc: AgentProcess,
                                                            client: RawClient) -> None:
    md = agent_proc.metadata()
    md.create_topic("plain", 2)
    md.create_topic("compact", 1, {"cleanup.policy": "compact"})
    md.create_topic("small", 1, {"max.message.bytes": "200"})
    md.close()
    good = batch(3)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    result = produce(client, {
        ("plain", 0): good,                       # offsets 0..2
        ("plain", 1): bytes(bad_crc),             # corrupt: nothing stored
        ("plain", 7): good,
        ("missing", 0): good,
        ("compact", 0): batch(1, key=None),
        ("small", 0): batch(1, size=500),
    })
    assert result == {
        ("plain", 0): (ErrorCode.none, 0),
        ("plain", 1): (ErrorCode.corrupt_message, -1),
        ("plain", 7): (ErrorCode.unknown_topic_or_partition, -1),
        ("missing", 0): (ErrorCode.unknown_topic_or_partition, -1),
        ("compact", 0): (ErrorCode.invalid_record, -1),
        ("small", 0): (ErrorCode.message_too_large, -1),
    }
    assert produce(client, {("plain", 1): b"not a batch at all"}) == {
        ("plain", 1): (ErrorCode.corrupt_message, -1)}
    # Kafka's ProduceRequest.validateRecords: exactly one batch per partition (v3+), and
    # none is INVALID_RECORD too; nothing of either is stored.
    assert produce(client, {("plain", 1): good + batch(2), ("plain", 0): b""}) == {
        ("plain", 1): (ErrorCode.invalid_record, -1),
        ("plain", 0): (ErrorCode.invalid_record, -1)}
    assert list_offset(client, "plain", 0, -1)[:2] == (ErrorCode.none, 3)
    assert list_offset(client, "plain", 1, -1)[:2] == (ErrorCode.none, 0)
    assert produce(client, {("compact", 0): batch(2)}) == {("compact", 0): (ErrorCode.none, 0)}


@pytest.mark.parametrize(("version", "code"), [(3, ErrorCode.unsupported_compression_type),
                                               (6, ErrorCode.unsupported_compression_type),
                                               (7, ErrorCode.none)])
def test_zstd_needs_produce_v7(agent_proc: AgentProcess, client: RawClient, version: int,
                               code: ErrorCode) -> None:
    """Kafka's ProduceRequest.validateRecords: zstd batches only from Produce v7 (KIP-110)."""
    md = agent_proc.metadata()
    md.create_topic("z", 1)
    md.close()
    zstd = build_batch([(0, 1_000, b"k", b"v" * 100, [])], compression=Compression.ZSTD)
    module = importlib.import_module(f"kio.schema.produce.v{version}.request")
    req = module.ProduceRequest(
        transactional_id=None, acks=i16(-1), timeout=_ms(30_000),
        topic_data=(module.TopicProduceData(name=TopicName("z"), partition_data=(
            module.PartitionProduceData(index=i32(0), records=Records(zstd)),)),))
    part = client.call(0, version, req).responses[0].partition_responses[0]
    assert part.error_code == code
    assert list_offset(client, "z", 0, -1)[:2] == (ErrorCode.none,
                                                   1 if code == ErrorCode.none else 0)


def test_a_transactional_batch_fails_the_whole_produce(agent_proc: AgentProcess,
                                                     client: RawClient) -> None:
    """As KafkaApis: a Produce holding a transactional batch without a transactional id is
    answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition, fatal for clients
    rather than a retriable UNKNOWN_TOPIC_OR_PARTITION; nothing of it is stored."""
    md = agent_proc.metadata()
    md.create_topic("t", 2)
    md.close()
    txn = AioBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=7,
                     producer_epoch=0, base_sequence=0, batch_size=1 << 30)
    txn.append(0, timestamp=1_000, key=b"k", value=b"v", headers=[])
    assert read_header(bytes(txn.build())).is_transactional
    refused = (ErrorCode.transactional_id_authorization_failed.value, -1)
    assert produce(client, {("t", 0): bytes(txn.build()), ("t", 1): batch(1)}) == {
        ("t", 0): refused, ("t", 1): refused}
    assert [list_offset(client, "t", p, -1)[:2] for p in (0, 1)] == [(ErrorCode.none, 0)] * 2
    assert produce(client, {("t", 1): batch(1)}) == {("t", 1): (ErrorCode.none, 0)}


def test_partitions_added_through_another_agent_take_records_at_once(backend: Backend) -> None:
    """CreatePartitions through agent A; agent B, which cached the topic with one partition
    (topic.refresh.ms far off), reloads it once when a produce names a partition past its
    count and stores the records, instead of answering UNKNOWN_TOPIC_OR_PARTITION until the
    refresh; a partition still past the end after the reload is refused, nothing stored.
    Before the fix B answered UNKNOWN_TOPIC_OR_PARTITION from its cache."""
    slow_refresh = {"SILT_AGENT_TOPIC_REFRESH_MS": "600000"}
    a = backend.agent("a", slow_refresh).start()
    b = backend.agent("b", slow_refresh).start()
    md = backend.metadata()
    client = RawClient(b.port)
    try:
        md.create_topic("grow", 1)
        assert produce(client, {("grow", 0): batch(1)}) == {("grow", 0): (ErrorCode.none, 0)}
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(60)
        assert produce(client, {("grow", 2): batch(2), ("grow", 3): batch(1)}) == {
            ("grow", 2): (ErrorCode.none, 0),
            ("grow", 3): (ErrorCode.unknown_topic_or_partition, -1)}
        assert list_offset(client, "grow", 2, -1)[:2] == (ErrorCode.none, 2)
    finally:
        client.close()
        md.close()
        a.terminate()
        b.terminate()


def test_fetch_limits_offsets_and_range(agent_proc: AgentProcess, client: RawClient) -> None:
    md = agent_proc.metadata()
    md.create_topic("t", 1)
    md.close()
    sizes = []
    for n in range(3):  # three produce requests: three flushes, three objects
        b = batch(4, size=300)
        sizes.append(len(b))
        assert produce(client, {("t", 0): b}) == {("t", 0): (ErrorCode.none, 4 * n)}
    whole = fetch(client, "t", 0, 0)
    assert (whole.error_code, whole.high_watermark, whole.log_start_offset) == (
        ErrorCode.none, 12, 0)
    assert batch_bases(whole.records) == [(0, -1), (4, -1), (8, -1)]  # across objects
    # partition_max_bytes below one batch: still the first batch, whole
    first = fetch(client, "t", 0, 0, partition_max_bytes=10)
    assert batch_bases(first.records) == [(0, -1)] and len(first.records) == sizes[0]
    two = fetch(client, "t", 0, 0, partition_max_bytes=sizes[0] + sizes[1])
    assert batch_bases(two.records) == [(0, -1), (4, -1)]
    # from inside a batch: that batch and the rest (the client skips offsets below)
    assert batch_bases(fetch(client, "t", 0, 5).records) == [(4, -1), (8, -1)]
    at_end = fetch(client, "t", 0, 12)
    assert (at_end.error_code, at_end.records) == (ErrorCode.none, b"")
    assert fetch(client, "t", 0, 13).error_code == ErrorCode.offset_out_of_range
    assert fetch(client, "nope", 0, 0).error_code == ErrorCode.unknown_topic_or_partition


def test_fetch_of_many_partitions_reads_past_their_first_segments(
        agent_proc: AgentProcess, client: RawClient) -> None:
    from agent.protocol.apis.fetch import FIRST_SEGMENTS

    md = agent_proc.metadata()
    md.create_topic("many", 3)
    md.close()
    flushes = FIRST_SEGMENTS + 3  # one produce request per flush: a segment per partition
    for n in range(flushes):
        assert produce(client, {("many", 0): batch(2), ("many", 1): batch(2)}) == {
            ("many", 0): (ErrorCode.none, 2 * n), ("many", 1): (ErrorCode.none, 2 * n)}
    req = f12.FetchRequest(
        max_wait=_ms(0), min_bytes=i32(1), max_bytes=i32(50 << 20), isolation_level=i8(0),
        topics=(f12.FetchTopic(topic=TopicName("many"), partitions=tuple(
            f12.FetchPartition(partition=i32(q), fetch_offset=i64(o),
                               partition_max_bytes=i32(1 << 20))
            for q, o in ((0, 0), (1, 5), (2, 0)))),), forgotten_topics_data=())
    parts = {int(p.partition_index): p for p in client.call(1, 12, req).responses[0].partitions}
    assert [b for b, _ in batch_bases(parts[0].records)] == [2 * n for n in range(flushes)]
    assert [b for b, _ in batch_bases(parts[1].records)] == [2 * n for n in range(2, flushes)]
    assert parts[2].error_code == ErrorCode.none and not parts[2].records


def test_fetch_below_log_start_is_out_of_range(agent_proc: AgentProcess,
                                               client: RawClient) -> None:
    md = agent_proc.metadata()
    md.create_topic("old", 1, {"retention.ms": "60000"})
    assert produce(client, {("old", 0): batch(2, ts=1_000)}) == {("old", 0): (ErrorCode.none, 0)}
    now = 4_000_000_000_000
    assert produce(client, {("old", 0): batch(1, ts=now)}) == {("old", 0): (ErrorCode.none, 2)}
    md.apply_retention()  # the 1970 segment goes; the log starts at 2
    md.close()
    assert fetch(client, "old", 0, 0).error_code == ErrorCode.offset_out_of_range
    kept = fetch(client, "old", 0, 2)
    assert (kept.error_code, kept.log_start_offset, batch_bases(kept.records)) == (
        ErrorCode.none, 2, [(2, -1)])
    assert list_offset(client, "old", 0, -2)[:2] == (ErrorCode.none, 2)


def test_list_offsets_by_timestamp_and_max_timestamp(agent_proc: AgentProcess,
                                                     client: RawClient) -> None:
    md = agent_proc.metadata()
    md.create_topic("ts", 1)
    md.close()
    stamps = [[10, 20, 30], [25, 90, 40], [50, 60]]  # offsets 0-2, 3-5, 6-7
    for s in stamps:
        b = build_batch([(i, t, b"k", b"v", []) for i, t in enumerate(s)])
        assert produce(client, {("ts", 0): b})[("ts", 0)][0] == ErrorCode.none
    assert list_offset(client, "ts", 0, -2) == (ErrorCode.none, 0, -1)
    assert list_offset(client, "ts", 0, -1) == (ErrorCode.none, 8, -1)
    assert list_offset(client, "ts", 0, -3) == (ErrorCode.none, 4, 90)
    assert list_offset(client, "ts", 0, 21) == (ErrorCode.none, 2, 30)
    assert list_offset(client, "ts", 0, 45) == (ErrorCode.none, 4, 90)
    assert list_offset(client, "ts", 0, 91) == (ErrorCode.none, -1, -1)
    assert list_offset(client, "nope", 0, -1)[0] == ErrorCode.unknown_topic_or_partition
