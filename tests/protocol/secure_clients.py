"""One produce-then-consume round trip per client library (confluent-kafka, kafka-python,
aiokafka, kcat) with the security settings a test gives, in each library's own names:
what the TLS and SASL tests run against a real agent."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

WAIT_S = 30
VALUES = [b"v0", b"v1", b"v2"]


def confluent(bootstrap: str, conf: Mapping[str, Any], topic: str) -> list[bytes]:
    """librdkafka (`conf`: security.protocol, ssl.*, sasl.*, oauth_cb)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    failed: list[object] = []
    for value in VALUES:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(WAIT_S) == 0 and not failed, failed
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "secure",
                         "enable.auto.commit": False, **conf})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    for _ in range(WAIT_S * 5):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value() or b"")
        if len(got) >= len(VALUES):
            break
    consumer.close()
    return got


def kafka_python(bootstrap: str, conf: Mapping[str, Any], topic: str) -> list[bytes]:
    """kafka-python (`conf`: security_protocol, ssl_cafile, sasl_mechanism, ...)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **conf)
    for value in VALUES:
        producer.send(topic, value=value, partition=0).get(timeout=WAIT_S)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=WAIT_S * 1000, **conf)
    consumer.assign([KTopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) >= len(VALUES):
            break
    consumer.close()
    return got


def aiokafka(bootstrap: str, conf: Mapping[str, Any], topic: str) -> list[bytes]:
    """aiokafka (`conf`: security_protocol, ssl_context, sasl_mechanism, ...)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    async def roundtrip() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    enable_idempotence=False, **conf)
        await producer.start()
        try:
            for value in VALUES:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    **conf)
        await consumer.start()
        try:
            tp = ATopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got = [await asyncio.wait_for(consumer.getone(), WAIT_S) for _ in VALUES]
        finally:
            await consumer.stop()
        return [r.value for r in got if r.value is not None]

    return asyncio.run(roundtrip())


def kcat_path() -> str:
    path = shutil.which("kcat")
    if path is None:
        if os.environ.get("CI") or os.environ.get("SILT_REQUIRE_SERVERS"):
            pytest.fail("kcat is not installed (CI installs the Debian package `kcat`)")
        pytest.skip("kcat is not installed")
    return path


def kcat(bootstrap: str, conf: Mapping[str, str], topic: str) -> list[bytes]:
    """kcat (`conf`: librdkafka properties, given as -X)."""
    exe = kcat_path()
    x = [arg for k, v in conf.items() for arg in ("-X", f"{k}={v}")]
    subprocess.run([exe, "-P", "-b", bootstrap, "-t", topic, "-p", "0", *x],
                   input=b"\n".join(VALUES) + b"\n", check=True, timeout=120)
    out = subprocess.run([exe, "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o",
                          "beginning", "-e", *x], capture_output=True, check=True,
                         timeout=120).stdout
    return out.splitlines()[-len(VALUES):]


def kcat_metadata(bootstrap: str, conf: Mapping[str, str],
                  wait_s: int = 10) -> subprocess.CompletedProcess[str]:
    """`kcat -L`, waiting up to `wait_s` for the metadata (the exit code and stderr say
    whether the client got in)."""
    x = [arg for k, v in conf.items() for arg in ("-X", f"{k}={v}")]
    return subprocess.run([kcat_path(), "-L", "-b", bootstrap, "-m", str(wait_s), *x],
                          capture_output=True, text=True, timeout=60)
