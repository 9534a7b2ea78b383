"""The agent registry and idempotent producers through `silt agent` processes: InitProducerId,
the idempotence error codes, stock clients with idempotence on, two agents on one store, and
an idempotent resend to a second agent after the first died between its commit and its ack.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition
from kio.schema.describe_cluster.v1 import request as dc1
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as fc4
from kio.schema.init_producer_id.v4 import request as ip4
from kio.schema.metadata.v12 import request as m12
from kio.schema.types import TransactionalId
from kio.static.primitive import i8, i32Timedelta

from agent.placement import leader
from fileformat import read_header
from metadata import AgentInfo, MetadataStore

from ..idempotence.helpers import client_batch
from .server import AgentProcess, Backend, RawClient
from .test_raw import fetch, produce

REGISTERED_S = 60.0
# Short agent sessions so that a killed agent stops being listed within the test.
FAST_SESSIONS = {"SILT_METADATA_BROKER_SESSION_TIMEOUT_MS": "1500",
                 "SILT_METADATA_BROKER_HEARTBEAT_INTERVAL_MS": "300"}


def _init_producer_id(client: RawClient, transactional_id: str | None = None) -> Any:
    return client.call(22, 4, ip4.InitProducerIdRequest(
        transactional_id=None if transactional_id is None else TransactionalId(transactional_id),
        transaction_timeout=i32Timedelta.parse(timedelta(seconds=60))))


def _metadata(port: int) -> tuple[set[tuple[int, str, int]], dict[tuple[str, int], int]]:
    """(brokers as (node id, host, port), leader node id per partition) from one agent."""
    client = RawClient(port)
    try:
        resp = client.call(3, 12, m12.MetadataRequest(
            topics=None, allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
    finally:
        client.close()
    brokers = {(int(b.node_id), b.host, int(b.port)) for b in resp.brokers}
    leaders = {(t.name, int(p.partition_index)): int(p.leader_id)
               for t in resp.topics for p in t.partitions}
    return brokers, leaders


def _wait_live(md: MetadataStore, ports: set[int]) -> list[AgentInfo]:
    """The live agents once exactly the agents on `ports` are live."""
    deadline = time.monotonic() + REGISTERED_S
    while True:
        live = md.live_brokers()
        if {a.port for a in live} == ports:
            return live
        assert time.monotonic() < deadline, f"live agents {live}, expected ports {ports}"
        time.sleep(0.1)


def _producer_ids(port: int, topic: str, partition: int) -> set[int]:
    """The producer ids of the batches stored in a partition (read from one agent)."""
    client = RawClient(port)
    try:
        records = bytes(fetch(client, topic, partition, 0).records or b"")
    finally:
        client.close()
    ids, pos = set(), 0
    while pos < len(records):
        h = read_header(records, pos)
        ids.add(h.producer_id)
        pos += h.length
    return ids


def _consume_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record of the topic, read with confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    got: list[tuple[int, int, bytes]] = []
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p]])
        while len(got) < sum(ends.values()):
            msg = consumer.poll(30)
            assert msg is not None, f"no record after {len(got)} of {sum(ends.values())}"
            assert msg.error() is None, msg.error()
            partition, offset, value = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and value is not None
            got.append((partition, offset, value))
    finally:
        consumer.close()
    return sorted(got)


# ------------------------------------------------------------------ one agent, raw requests


def test_init_producer_id_and_idempotence_error_codes(agent_proc: AgentProcess) -> None:
    md = agent_proc.metadata()
    md.create_topic("t", 1)
    client = RawClient(agent_proc.port)
    try:
        first, second = _init_producer_id(client), _init_producer_id(client)
        assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
        assert (second.error_code, second.producer_epoch) == (ErrorCode.none, 0)
        assert first.producer_id >= 0 and second.producer_id != first.producer_id
        coordinators = client.call(10, 4, fc4.FindCoordinatorRequest(
            key_type=i8(1), coordinator_keys=("txn-1",))).coordinators
        assert [(c.error_code, c.port) for c in coordinators] == [
            (ErrorCode.none, agent_proc.port)]
        txn = _init_producer_id(client, "txn-1")
        assert (txn.error_code, txn.producer_epoch) == (ErrorCode.none, 0)
        assert txn.producer_id not in (-1, first.producer_id, second.producer_id)
        groups = client.call(10, 4, fc4.FindCoordinatorRequest(
            key_type=i8(0), coordinator_keys=("g",))).coordinators
        assert [(c.error_code, c.port) for c in groups] == [(ErrorCode.none, agent_proc.port)]

        pid = int(first.producer_id)
        ok = (ErrorCode.none.value, 0)
        assert produce(client, {("t", 0): client_batch(pid, 0, 0, tag=b"a")}) == {("t", 0): ok}
        assert produce(client, {("t", 0): client_batch(pid, 0, 3, tag=b"b")}) == {
            ("t", 0): (ErrorCode.none.value, 3)}
        # a resend of the first batch: success with its original offset, stored once
        assert produce(client, {("t", 0): client_batch(pid, 0, 0, tag=b"a")}) == {("t", 0): ok}
        gap = produce(client, {("t", 0): client_batch(pid, 0, 9)})
        assert gap[("t", 0)][0] == ErrorCode.out_of_order_sequence_number.value
        assert produce(client, {("t", 0): client_batch(pid, 1, 0, tag=b"c")}) == {
            ("t", 0): (ErrorCode.none.value, 6)}
        old = produce(client, {("t", 0): client_batch(pid, 0, 6)})
        assert old[("t", 0)][0] == ErrorCode.invalid_producer_epoch.value
        stored = bytes(fetch(client, "t", 0, 0).records or b"")
        assert [stored.count(tag) for tag in (b"a-0", b"b-0", b"c-0")] == [1, 1, 1]
        assert fetch(client, "t", 0, 0).high_watermark == 9
    finally:
        client.close()
        md.close()


def test_describe_cluster_lists_this_agent(agent_proc: AgentProcess) -> None:
    md = agent_proc.metadata()
    (me,) = _wait_live(md, {agent_proc.port})
    md.close()
    client = RawClient(agent_proc.port)
    try:
        resp = client.call(60, 1, dc1.DescribeClusterRequest(
            include_cluster_authorized_operations=False))
    finally:
        client.close()
    assert resp.error_code == ErrorCode.none
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [
        (me.node_id, "127.0.0.1", agent_proc.port)]
    assert resp.controller_id == me.node_id


# ------------------------------------------------------------------ stock idempotent clients


def test_kafka_python_default_idempotent_producer(any_agent: AgentProcess) -> None:
    agent_proc = any_agent
    md = agent_proc.metadata()
    md.create_topic("kp", 3)
    md.close()
    producer = KafkaProducer(bootstrap_servers=agent_proc.bootstrap, linger_ms=5)
    assert producer.config["enable_idempotence"] is True  # kafka-python 3's default
    futures = [producer.send("kp", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3)
               for i in range(300)]
    producer.flush(60)
    acked = sorted((f.get(timeout=60).partition, f.get(timeout=60).offset) for f in futures)
    producer.close()
    assert acked == sorted((p, o) for p in range(3) for o in range(100))
    consumer = KafkaConsumer(bootstrap_servers=agent_proc.bootstrap, enable_auto_commit=False)
    tps = [KTopicPartition("kp", p) for p in range(3)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < 300 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            values += [r.value for r in records]
    consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(300))
    for p in range(3):  # the batches came from an idempotent producer
        ids = _producer_ids(agent_proc.port, "kp", p)
        assert len(ids) == 1 and min(ids) >= 0


def test_confluent_kafka_idempotent_producer(any_agent: AgentProcess) -> None:
    agent_proc = any_agent
    md = agent_proc.metadata()
    md.create_topic("ck", 2)
    md.close()
    acks: list[tuple[Any, int | None, int | None]] = []
    producer = Producer({"bootstrap.servers": agent_proc.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(200):
        producer.produce("ck", b"v%d" % i, b"k%d" % i, partition=i % 2,
                         on_delivery=lambda e, m: acks.append((e, m.partition(), m.offset())))
    assert producer.flush(60) == 0
    assert [e for e, _, _ in acks if e is not None] == []
    assert sorted((p or 0, o or 0) for _, p, o in acks) == sorted(
        (p, o) for p in range(2) for o in range(100))
    got = _consume_all(agent_proc.bootstrap, "ck", 2)
    assert sorted(v for *_, v in got) == sorted(b"v%d" % i for i in range(200))
    for p in range(2):
        ids = _producer_ids(agent_proc.port, "ck", p)
        assert len(ids) == 1 and min(ids) >= 0


# ------------------------------------------------------------------ two agents


def test_two_agents_list_both_and_serve_every_partition(
        two_agents: tuple[AgentProcess, AgentProcess]) -> None:
    a, b = two_agents
    md = a.metadata()
    md.create_topic("both", 8)
    live = _wait_live(md, {a.port, b.port})
    brokers_a, leaders_a = _metadata(a.port)
    brokers_b, leaders_b = _metadata(b.port)
    assert brokers_a == brokers_b == {(x.node_id, "127.0.0.1", x.port) for x in live}
    assert leaders_a == leaders_b == {("both", p): leader("both", p, live).node_id
                                      for p in range(8)}
    assert set(leaders_a.values()) == {x.node_id for x in live}  # spread over both
    # any agent serves any partition: each partition gets batches through both agents
    clients = [RawClient(a.port), RawClient(b.port)]
    try:
        for rnd in range(2):
            for n, client in enumerate(clients):
                tag = b"r%da%d" % (rnd, n)
                got = produce(client, {("both", p): client_batch(-1, -1, -1, count=2, tag=tag)
                                       for p in range(8)})
                assert {e for e, _ in got.values()} == {0}
                assert {o for _, o in got.values()} == {(2 * rnd + n) * 2}
        for client in clients:  # and reads through either see all of them
            for p in range(8):
                records = bytes(fetch(client, "both", p, 0).records or b"")
                assert records.count(b"r0a0") == records.count(b"r1a1") == 2
                assert records.count(b"r0a1") == records.count(b"r1a0") == 2
    finally:
        for client in clients:
            client.close()
    for proc in (a, b):
        consumed = _consume_all(proc.bootstrap, "both", 8)
        assert [(p, o) for p, o, _ in consumed] == [(p, o) for p in range(8) for o in range(8)]
    # a stopped agent deregisters: the other lists itself alone and leads everything
    assert b.terminate() == 0
    assert [x.port for x in md.live_brokers()] == [a.port]
    brokers, leaders = _metadata(a.port)
    assert {port for _, _, port in brokers} == {a.port}
    assert set(leaders.values()) == {n for n, _, _ in brokers}
    md.close()


def test_idempotent_resend_to_second_agent_after_first_died_before_ack(
        backend: Backend, tmp_path: Path) -> None:
    """Agent A dies (SIGKILL) right after committing a flush, before replying; the
    librdkafka producer resends the same batches to agent B (leader once A's session times
    out), which answers them with the original offsets: every record exactly once."""
    marker = tmp_path / "killed"
    a = backend.agent("a", FAST_SESSIONS,
                      entry=["-m", "tests.protocol.crashing_agent", str(marker)]).start()
    b = backend.agent("b", FAST_SESSIONS).start()
    md = a.metadata()
    try:
        md.create_topic("once", 2)
        live = _wait_live(md, {a.port, b.port})
        (partition,) = [p for p in range(2) if leader("once", p, live).port == a.port]
        acks: list[tuple[Any, int | None, int | None]] = []
        producer = Producer({"bootstrap.servers": f"{a.bootstrap},{b.bootstrap}",
                             "enable.idempotence": True, "linger.ms": 20,
                             "message.timeout.ms": 120_000})

        def send(first: int, count: int) -> None:
            for i in range(first, first + count):
                producer.produce("once", b"v%d" % i, b"k%d" % i, partition=partition,
                                 on_delivery=lambda e, m: acks.append(
                                     (e, m.partition(), m.offset())))
            assert producer.flush(120) == 0

        send(0, 50)  # A commits these, then dies before answering
        assert marker.exists()
        assert a.proc is not None and a.proc.wait(30) == -signal.SIGKILL
        send(50, 50)  # B only now
        producer.flush(30)
        assert [e for e, _, _ in acks if e is not None] == []
        assert sorted(o or 0 for _, _, o in acks) == list(range(100))
        got = _consume_all(b.bootstrap, "once", 2)
        assert [(p, o) for p, o, _ in got] == [(partition, o) for o in range(100)]
        assert sorted(v for *_, v in got) == sorted(b"v%d" % i for i in range(100))
        # A's session ran out; B is still listed because it heartbeats
        (alive,) = _wait_live(md, {b.port})
        assert alive.heartbeat_at_ms > alive.registered_at_ms
    finally:
        md.close()
        b.terminate()
        a.terminate(signal.SIGKILL)
