"""Client quotas through a real `silt agent`: AlterClientQuotas / DescribeClientQuotas with
Kafka's entity rules and filters, and producer_byte_rate / consumer_byte_rate enforced
(throttle_time_ms and a muted connection) on confluent-kafka clients, their measured rates
bounded by the quota."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8

from agent.protocol.apis import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS

from .server import AgentProcess, RawClient
from .test_groups_raw import build

# Two one-second samples: a rate is measured over at least one second (Kafka's default of
# 11 lets a client burst ten seconds' worth first), so a test sees throttling in seconds.
WINDOW_ENV = {"SILT_AGENT_QUOTA_WINDOW_NUM": "2"}


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log", extra_env=dict(WINDOW_ENV)).start()
    yield proc
    proc.terminate()


def alter(client: RawClient, entity: list[tuple[str, str | None]],
          ops: dict[str, float | None], validate_only: bool = False) -> tuple[int, str | None]:
    v = 1
    req = build(ALTER_CLIENT_QUOTAS, v, validate_only=validate_only, entries=(build(
        ALTER_CLIENT_QUOTAS, v, "EntryData",
        entity=tuple(build(ALTER_CLIENT_QUOTAS, v, "EntityData", entity_type=k, entity_name=n)
                     for k, n in entity),
        ops=tuple(build(ALTER_CLIENT_QUOTAS, v, "OpData", key=key,
                        value=f64(0.0 if value is None else float(value)),
                        remove=value is None)
                  for key, value in ops.items())),))
    [entry] = client.call(ALTER_CLIENT_QUOTAS, v, req).entries
    return int(entry.error_code), entry.error_message


def describe(client: RawClient, components: list[tuple[str, int, str | None]],
             strict: bool = False) -> Any:
    v = 1
    return client.call(DESCRIBE_CLIENT_QUOTAS, v, build(
        DESCRIBE_CLIENT_QUOTAS, v, strict=strict, components=tuple(
            build(DESCRIBE_CLIENT_QUOTAS, v, "ComponentData", entity_type=k,
                  match_type=i8(m), match=name) for k, m, name in components)))


def _entries(resp: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: float(v.value) for v in entry.values} for entry in resp.entries}


def test_alter_and_describe_client_quotas(agent: AgentProcess) -> None:
    """Quotas set, described by Kafka's filters (exact, default, specified, strict) and
    removed; bad alterations and filters refused with Kafka's codes and words."""
    client = RawClient(agent.port)
    try:
        ok = (ErrorCode.none.value, None)
        assert alter(client, [("client-id", "c1")], {"producer_byte_rate": 1000}) == ok
        assert alter(client, [("user", "alice"), ("client-id", None)],
                     {"consumer_byte_rate": 2000, "request_percentage": 50.5}) == ok
        assert alter(client, [("user", None)], {"producer_byte_rate": 3000}) == ok
        bad = ErrorCode.invalid_request.value
        assert alter(client, [], {"producer_byte_rate": 1}) == (
            bad, "Invalid empty client quota entity")
        assert alter(client, [("user", "a")], {"producer_byte_rate": 1.5}) == (
            bad, "producer_byte_rate cannot be a fractional value.")
        assert alter(client, [("user", "a")], {"producer_byte_rate": 0}) == (
            bad, "Quota producer_byte_rate must be greater than 0")
        assert alter(client, [("user", "a")], {"nope": 1}) == (
            bad, "Invalid configuration key nope")
        assert alter(client, [("ip", "1.2.3.4"), ("user", "a")], {"x": 1})[0] == bad
        assert alter(client, [("user", "a")], {"producer_byte_rate": 5},
                     validate_only=True) == ok
        everything = _entries(describe(client, []))
        assert everything == {
            (("client-id", "c1"),): {"producer_byte_rate": 1000.0},
            (("client-id", None), ("user", "alice")): {"consumer_byte_rate": 2000.0,
                                                       "request_percentage": 50.5},
            (("user", None),): {"producer_byte_rate": 3000.0}}
        assert list(_entries(describe(client, [("user", 0, "alice")]))) == [
            (("client-id", None), ("user", "alice"))]
        assert list(_entries(describe(client, [("user", 1, None)]))) == [(("user", None),)]
        assert set(_entries(describe(client, [("user", 2, None)]))) == {
            (("client-id", None), ("user", "alice")), (("user", None),)}
        assert list(_entries(describe(client, [("user", 2, None)], strict=True))) == [
            (("user", None),)]
        refused = describe(client, [("user", 0, None)])
        assert (refused.error_code, refused.error_message, refused.entries) == (
            ErrorCode.invalid_request,
            "Request specified MATCH_TYPE_EXACT, but set match string to null.", None)
        assert describe(client, [("group", 2, None)]).error_code == (
            ErrorCode.unsupported_version)
        assert alter(client, [("client-id", "c1")], {"producer_byte_rate": None}) == ok
        assert (("client-id", "c1"),) not in _entries(describe(client, []))
    finally:
        client.close()


def test_producer_and_consumer_are_throttled_to_their_quotas(agent: AgentProcess) -> None:
    """producer_byte_rate and consumer_byte_rate for one client id each: the agent answers
    throttle_time_ms past the quota and mutes the connection, so the bytes a client moves
    stay within about quota x elapsed time (plus the one-window burst); a client without a
    quota is not slowed."""
    md = agent.metadata()
    md.create_topic("q", 1)
    md.close()
    quota = 100_000
    client = RawClient(agent.port)
    try:
        assert alter(client, [("client-id", "slow-producer")],
                     {"producer_byte_rate": quota})[0] == 0
        assert alter(client, [("client-id", "slow-consumer")],
                     {"consumer_byte_rate": quota})[0] == 0
    finally:
        client.close()
    value, n = b"x" * 1000, 500  # 500 kB: five seconds at the quota

    def produce(client_id: str) -> tuple[float, list[int]]:
        throttles: list[int] = []
        producer = Producer({"bootstrap.servers": agent.bootstrap, "client.id": client_id,
                             "linger.ms": 5, "batch.size": 20_000,
                             "statistics.interval.ms": 100,
                             "stats_cb": lambda s: throttles.append(_throttle(s))})
        start = time.monotonic()
        for _ in range(n):
            producer.produce("q", value, partition=0)
            producer.poll(0)
        assert producer.flush(120) == 0
        elapsed = time.monotonic() - start
        producer.poll(0.3)
        return elapsed, throttles

    free, _ = produce("free-producer")
    slow, throttles = produce("slow-producer")
    sent = n * len(value)
    assert free < 3.0, free
    assert sent / slow <= quota * 1.6, (slow, sent / slow)  # ~quota, one window of burst
    assert max(throttles) > 0

    def consume(client_id: str) -> float:
        # librdkafka's default fetch sizes (1 MiB a partition): the agent caps a throttled
        # client's response at what its quota lets one window carry (Kafka's
        # getMaxValueInQuotaWindow), else every fetch would be over and none answered.
        consumer = Consumer({"bootstrap.servers": agent.bootstrap, "client.id": client_id,
                             "group.id": client_id, "enable.auto.commit": False})
        consumer.assign([TopicPartition("q", 0, 0)])
        got, start = 0, time.monotonic()
        try:
            while got < 2 * n and time.monotonic() - start < 120:
                msg = consumer.poll(1)
                if msg is not None and msg.error() is None:
                    got += 1
        finally:
            consumer.close()
        assert got == 2 * n
        return time.monotonic() - start

    fast_read = consume("free-consumer")
    slow_read = consume("slow-consumer")
    read = 2 * sent
    assert fast_read < 5.0, fast_read
    assert read / slow_read <= quota * 1.6, (slow_read, read / slow_read)
    assert read / slow_read >= quota / 2, (slow_read, read / slow_read)  # not starved


def _throttle(stats_json: str) -> int:
    """The largest broker throttle time librdkafka's statistics report."""
    import json

    stats = json.loads(stats_json)
    return max((int(b.get("throttle", {}).get("max", 0)) for b in stats["brokers"].values()),
               default=0)
