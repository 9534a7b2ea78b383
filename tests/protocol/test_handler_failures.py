"""A failure inside a handler is answered with Kafka's error code for it, per partition or
per resource, and the connection goes on serving: a topic deleted under a fetch, an object
store or database outage, a metadata commit that failed or whose outcome is unknown. A
connection whose replies can no longer be written ends, even with its reply queue full.

In process (not a subprocess) so that the test can make the store and the metadata store
fail, and see the server's connections."""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kio.schema.api_versions.v3 import request as av3
from kio.schema.create_partitions.v3 import request as cp3
from kio.schema.delete_records.v2 import request as dr2
from kio.schema.delete_topics.v6 import request as dt6
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as f12
from kio.schema.incremental_alter_configs.v1 import request as iac1
from kio.schema.metadata.v12 import request as m12
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from agent import Agent, AgentConfig
from agent.protocol import server as server_module
from agent.protocol.server import Server
from agent.protocol.writev import send_buffers
from metadata import MetadataStore
from metadata.errors import CommitConflictError, CommitUnknownError
from objectstore import open_backend
from objectstore.base import ObjectStore
from objectstore.errors import RetriableStoreError
from objectstore.wrappers import StoreWrapper

from .server import RawClient, local_context, serve_in_process
from .test_idempotent import _init_producer_id
from .test_raw import batch, fetch, produce

WAIT_S = 60.0
# What SQLAlchemy raises when the database cannot be reached.
DATABASE_DOWN = sa.exc.OperationalError(
    "SELECT 1", None, ConnectionRefusedError("injected: the database is unreachable"))


class FailingStore(StoreWrapper):
    """Ranged GETs fail while `failing` is set, as during an object-store outage."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.failing = False

    def get_range_writable(self, key: str, start: int, end: int) -> bytearray:
        if self.failing:
            raise RetriableStoreError(f"injected: GET {key} failed")
        return super().get_range_writable(key, start, end)


@dataclass
class Served:
    """A `Server` in process over a file store that can fail and SQLite."""

    server: Server
    metadata: MetadataStore
    store: FailingStore

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = FailingStore(open_backend(f"file://{tmp_path}/objects"))
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    agent = Agent(store, md, AgentConfig(linger_ms=0))
    ctx = local_context(agent, md, store)
    try:
        with serve_in_process(ctx) as server:
            yield Served(server, md, store)
    finally:
        agent.close()
        md.close()


@pytest.fixture
def client(served: Served) -> Iterator[RawClient]:
    c = RawClient(served.port, timeout=WAIT_S)
    yield c
    c.close()


def failing(exc: Exception) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc
    return fail


def still_served(client: RawClient) -> bool:
    """Whether the connection still answers (an ApiVersions round trip)."""
    return bool(client.call(18, 3, av3.ApiVersionsRequest(
        client_software_name="raw", client_software_version="1")).error_code == ErrorCode.none)


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(timedelta(milliseconds=ms))


def fetch_codes(client: RawClient, topic: str, partitions: list[int]) -> list[ErrorCode]:
    """The error code of each partition of one Fetch v12 from offset 0."""
    req = f12.FetchRequest(
        max_wait=_ms(0), min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0),
        topics=(f12.FetchTopic(topic=TopicName(topic), partitions=tuple(
            f12.FetchPartition(partition=i32(p), fetch_offset=i64(0),
                               partition_max_bytes=i32(1 << 20)) for p in partitions)),),
        forgotten_topics_data=())
    return [p.error_code for p in client.call(1, 12, req).responses[0].partitions]


# ---------------------------------------------------------------- fetch


def test_fetch_of_a_topic_deleted_under_it(served: Served, client: RawClient,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    md = served.metadata
    md.create_topic("t", 1)
    assert produce(client, {("t", 0): batch(2)}) == {("t", 0): (ErrorCode.none, 0)}
    read = md.partitions_from

    def deleted_first(*args: Any, **kwargs: Any) -> Any:
        md.delete_topic("t")  # after the fetch resolved the topic, before it reads it
        return read(*args, **kwargs)

    monkeypatch.setattr(md, "partitions_from", deleted_first)
    part = fetch(client, "t", 0, 0)
    assert (part.error_code, part.records) == (ErrorCode.unknown_topic_or_partition, b"")
    assert still_served(client)


def test_fetch_during_an_object_store_outage(served: Served, client: RawClient) -> None:
    served.metadata.create_topic("t", 2)
    assert produce(client, {("t", 0): batch(2), ("t", 1): batch(3)}) == {
        ("t", 0): (ErrorCode.none, 0), ("t", 1): (ErrorCode.none, 0)}
    served.store.failing = True
    assert fetch_codes(client, "t", [0, 1]) == [ErrorCode.kafka_storage_error] * 2
    served.store.failing = False  # retriable: the next fetch reads
    assert fetch_codes(client, "t", [0, 1]) == [ErrorCode.none] * 2


def test_fetch_during_a_database_outage(served: Served, client: RawClient,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    served.metadata.create_topic("t", 2)
    assert produce(client, {("t", 0): batch(1), ("t", 1): batch(1)}) == {
        ("t", 0): (ErrorCode.none, 0), ("t", 1): (ErrorCode.none, 0)}
    # The one statement reading every partition's offsets and first segments.
    monkeypatch.setattr(served.metadata, "partitions_from", failing(DATABASE_DOWN))
    assert fetch_codes(client, "t", [0, 1]) == [ErrorCode.unknown_server_error] * 2
    monkeypatch.undo()
    part = fetch(client, "t", 0, 0)
    assert (part.error_code, part.high_watermark) == (ErrorCode.none, 1)


# ---------------------------------------------------------------- producer ids, metadata


def test_init_producer_id_during_a_database_outage(served: Served, client: RawClient,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served.metadata, "allocate_producer_id", failing(DATABASE_DOWN))
    resp = _init_producer_id(client)
    assert (resp.error_code, resp.producer_id) == (ErrorCode.coordinator_not_available, -1)
    monkeypatch.undo()  # retriable: the client asks again
    resp = _init_producer_id(client)
    assert resp.error_code == ErrorCode.none and resp.producer_id >= 0


def test_metadata_of_named_topics_during_a_database_outage(
        served: Served, client: RawClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Retriable LEADER_NOT_AVAILABLE, never UNKNOWN_TOPIC_OR_PARTITION (the topics may
    well exist), and no broker list when the registry cannot be read either."""
    served.metadata.create_topic("t", 1)
    monkeypatch.setattr(served.metadata, "get_topic", failing(DATABASE_DOWN))
    monkeypatch.setattr(served.server.ctx, "live_brokers", failing(DATABASE_DOWN))
    resp = client.call(3, 12, m12.MetadataRequest(
        topics=(m12.MetadataRequestTopic(topic_id=None, name=TopicName("t")),
                m12.MetadataRequestTopic(topic_id=None, name=TopicName("u"))),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    assert [(t.name, t.error_code, t.partitions) for t in resp.topics] == [
        ("t", ErrorCode.leader_not_available, ()), ("u", ErrorCode.leader_not_available, ())]
    assert resp.brokers == ()
    assert still_served(client)


# ---------------------------------------------------------------- admin changes

FAILURES = [
    (CommitConflictError("injected: not applied"), ErrorCode.request_timed_out),
    (CommitUnknownError("injected: outcome unknown"), ErrorCode.unknown_server_error),
    (DATABASE_DOWN, ErrorCode.unknown_server_error),
]


@pytest.mark.parametrize(("exc", "code"), FAILURES, ids=["conflict", "unknown", "database"])
def test_admin_changes_answer_a_failed_commit_per_resource(
        served: Served, client: RawClient, monkeypatch: pytest.MonkeyPatch,
        exc: Exception, code: ErrorCode) -> None:
    """A commit known not to be applied is REQUEST_TIMED_OUT (retriable: the admin client
    tries again); one whose outcome is unknown, or any other failure, UNKNOWN_SERVER_ERROR
    with its message."""
    md = served.metadata
    md.create_topic("t", 1)
    for call in ("delete_topic", "add_partitions", "alter_topic_configs", "delete_records"):
        monkeypatch.setattr(md, call, failing(exc))
    deleted = client.call(20, 6, dt6.DeleteTopicsRequest(topics=(
        dt6.DeleteTopicState(name=TopicName("t"), topic_id=uuid.UUID(int=0)),),
        timeout=_ms(30_000))).responses[0]
    assert (deleted.error_code, "injected" in (deleted.error_message or "")) == (code, True)
    grown = client.call(37, 3, cp3.CreatePartitionsRequest(topics=(
        cp3.CreatePartitionsTopic(name=TopicName("t"), count=i32(2), assignments=None),),
        timeout=_ms(30_000), validate_only=False)).results[0]
    assert (grown.error_code, "injected" in (grown.error_message or "")) == (code, True)
    altered = client.call(44, 1, iac1.IncrementalAlterConfigsRequest(resources=(
        iac1.AlterConfigsResource(resource_type=i8(2), resource_name="t", configs=(
            iac1.AlterableConfig(name="retention.ms", config_operation=i8(0),
                                 value="1000"),)),),
        validate_only=False)).responses[0]
    assert (altered.error_code, "injected" in (altered.error_message or "")) == (code, True)
    dropped = client.call(21, 2, dr2.DeleteRecordsRequest(topics=(
        dr2.DeleteRecordsTopic(name=TopicName("t"), partitions=(
            dr2.DeleteRecordsPartition(partition_index=i32(0), offset=i64(-1)),)),),
        timeout=_ms(30_000))).topics[0].partitions[0]
    assert dropped.error_code == code
    assert still_served(client)
    monkeypatch.undo()
    assert md.get_topic("t").partitions == 1


# ---------------------------------------------------------------- connections


def test_a_connection_whose_replies_cannot_be_sent_ends_with_its_queue_full(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reply writer fails while the connection reads nothing more because its replies
    in flight are at MAX_IN_FLIGHT: the connection still ends (it once hung forever
    waiting for room in its reply queue) and the server goes on."""
    monkeypatch.setattr(server_module, "MAX_IN_FLIGHT", 1)
    loop = served.server.ctx.loop
    assert loop is not None
    sending_first, release = threading.Event(), asyncio.Event()  # (release: the loop's)

    async def broken_send(transport: asyncio.WriteTransport, buffers: Any) -> None:
        if not release.is_set():
            sending_first.set()
            await release.wait()
            raise ConnectionResetError("injected: the peer is gone")
        await send_buffers(transport, buffers)

    def full_socket(_: int, buffers: Any) -> list[memoryview]:
        return [memoryview(b) for b in buffers]  # nothing taken: the sender writes it

    monkeypatch.setattr(server_module, "send_buffers", broken_send)
    monkeypatch.setattr(server_module, "write_now", full_socket)
    client = RawClient(served.port, timeout=WAIT_S)
    request = av3.ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    # The first reply fails to go; the second and third wait for it (1 in flight).
    client.send_raw(b"".join(client.frame(18, 3, request) for _ in range(3)))
    assert sending_first.wait(WAIT_S)
    loop.call_soon_threadsafe(release.set)
    try:
        assert client.closed_by_server()
    finally:
        client.close()
    _until(lambda: not served.server._conns, "the connection ended")
    other = RawClient(served.port, timeout=WAIT_S)
    try:
        assert still_served(other)
    finally:
        other.close()


def test_a_reply_the_socket_takes_in_part_goes_out_whole_and_in_order(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ready reply written at once (the sender had nothing in hand) that the socket takes
    only in part: the sender writes the rest, and the replies behind it follow, in order."""
    taken: list[int] = []

    def part_taken(fd: int, buffers: Any) -> list[memoryview]:
        data = b"".join(buffers)
        n = os.write(fd, data[:7])  # the size and 3 bytes of the correlation id
        taken.append(n)
        return [memoryview(data)[n:]]

    monkeypatch.setattr(server_module, "write_now", part_taken)
    client = RawClient(served.port, timeout=WAIT_S)
    request = av3.ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    try:
        client.send_raw(b"".join(client.frame(18, 3, request) for _ in range(5)))
        for correlation_id in range(1, 6):
            body = client.read_frame()
            assert body is not None and struct.unpack_from(">i", body)[0] == correlation_id
        assert taken and all(n == 7 for n in taken)
        assert still_served(client)
    finally:
        client.close()


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)
