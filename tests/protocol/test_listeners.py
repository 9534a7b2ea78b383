"""Named listeners: several on one agent, each advertising its own endpoint; Metadata,
DescribeCluster and FindCoordinator answer with the endpoints of the listener the request
came in on, as Kafka does; clients work through either."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.describe_cluster.v1 import request as dcl1
from kio.schema.find_coordinator.v4 import request as fc4
from kio.schema.metadata.v12 import request as m12
from kio.static.primitive import i8

from agent.config import AgentConfig
from agent.listeners import parse_advertised, parse_listeners
from settings import SettingError

from .server import Backend, RawClient

WAIT_S = 30


def _metadata_brokers(port: int) -> list[tuple[int, str, int]]:
    client = RawClient(port)
    try:
        req = m12.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        return [(int(b.node_id), b.host, int(b.port)) for b in client.call(3, 12, req).brokers]
    finally:
        client.close()


def test_listener_settings() -> None:
    listeners = parse_listeners("INTERNAL://127.0.0.1:1,SASL_SSL://0.0.0.0:2",
                                "INTERNAL:PLAINTEXT,SASL_SSL:SASL_SSL")
    assert [(lst.name, lst.protocol, lst.tls, lst.sasl) for lst in listeners] == [
        ("INTERNAL", "PLAINTEXT", False, False), ("SASL_SSL", "SASL_SSL", True, True)]
    assert parse_advertised("SASL_SSL://kafka.example:9093", listeners) == {
        "INTERNAL": ("127.0.0.1", 1), "SASL_SSL": ("kafka.example", 9093)}
    assert [lst.name for lst in parse_listeners("127.0.0.1:9092")] == ["PLAINTEXT"]
    for bad, why in [("0.0.0.0:1", "wildcard"), ("FOO://h:1", "FOO has no security"),
                     ("PLAINTEXT://h:1,PLAINTEXT://h:2", "used twice"),
                     ("A://h:1,B://h:1", "used by two")]:
        with pytest.raises(SettingError, match=why):
            AgentConfig(listeners=bad, listener_security_protocol_map="A:SSL,B:SSL,"
                        "PLAINTEXT:PLAINTEXT")
    with pytest.raises(SettingError, match="not one of the listeners"):
        AgentConfig(advertised_listeners="SSL://h:1")
    with pytest.raises(SettingError, match=r"listener\.security\.protocol\.map"):
        AgentConfig(listener_security_protocol_map="A:TLS")


def test_each_listener_advertises_its_own_endpoints(backend: Backend, tmp_path: Path) -> None:
    """Two agents with an INTERNAL and an EXTERNAL listener each (EXTERNAL advertised under
    another name): a client of either listener is told every agent's endpoint on that
    listener, and produces and consumes through it."""
    procs = []
    for i in range(2):
        proc = backend.agent(f"agent{i}")
        proc.listeners = {"EXTERNAL": "PLAINTEXT"}
        proc.reserve_ports()  # chosen before the start, to advertise them
        proc.extra_env["SILT_AGENT_ADVERTISED_LISTENERS"] = \
            f"EXTERNAL://localhost:{proc.ports['EXTERNAL']}"
        procs.append(proc)
    try:
        for proc in procs:
            proc.start()
        with procs[0].metadata() as md:
            md.create_topic("t", 2)
        internal = _metadata_brokers(procs[0].port)
        external = _metadata_brokers(procs[0].ports["EXTERNAL"])
        assert sorted((h, p) for _, h, p in internal) == sorted(
            ("127.0.0.1", proc.port) for proc in procs)
        assert sorted((h, p) for _, h, p in external) == sorted(
            ("localhost", proc.ports["EXTERNAL"]) for proc in procs)
        assert [n for n, _, _ in internal] == [n for n, _, _ in external]

        client = RawClient(procs[1].ports["EXTERNAL"])
        cluster = client.call(60, 1, dcl1.DescribeClusterRequest(
            include_cluster_authorized_operations=False, endpoint_type=i8(1)))
        assert sorted(b.host for b in cluster.brokers) == ["localhost", "localhost"]
        found = client.call(10, 4, fc4.FindCoordinatorRequest(
            key_type=i8(0), coordinator_keys=("g",)))
        coordinator = found.coordinators[0]
        assert (int(coordinator.error_code), coordinator.host) == (0, "localhost")
        assert int(coordinator.port) in {proc.ports["EXTERNAL"] for proc in procs}
        client.close()

        bootstrap = procs[0].address("EXTERNAL")
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for p in range(2):
            producer.produce("t", value=f"v{p}".encode(), partition=p)
        assert producer.flush(WAIT_S) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", p, 0) for p in range(2)])
        seen = set()
        for _ in range(200):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
            if len(seen) == 2:
                break
        consumer.close()
        assert seen == {b"v0", b"v1"}
    finally:
        for proc in procs:
            if proc.proc is not None:
                proc.terminate()
