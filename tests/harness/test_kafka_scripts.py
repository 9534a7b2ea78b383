"""The stand-ins for Kafka's kafka-topics.sh and kafka-acls.sh that librdkafka's tests run
(harness.compat.kafka_scripts) do what the options say, against a real `silt agent`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import AclBindingFilter, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType

from harness.agent_process import AgentProcess
from harness.compat import kafka_scripts


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    proc = AgentProcess(f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db",
                        tmp_path / "agent.log", {
                            "SILT_AGENT_AUTHORIZER_CLASS_NAME":
                                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                            "SILT_AGENT_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"}).start()
    yield proc
    proc.terminate()


def _run(kafka: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(kafka / "bin" / script), *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_kafka_topics_creates_alters_and_deletes(agent: AgentProcess, tmp_path: Path) -> None:
    kafka = kafka_scripts.install(tmp_path / "kafka")
    boot = ("--bootstrap-server", agent.bootstrap)
    created = _run(kafka, "kafka-topics.sh", *boot, "--create", "--topic", "t",
                   "--partitions", "2", "--replication-factor", "1",
                   "--config", "cleanup.policy=compact", "--config", "segment.ms=500")
    assert created.returncode == 0, created.stderr
    md = agent.metadata()
    try:
        assert md.get_topic("t").partitions == 2
        assert _run(kafka, "kafka-topics.sh", *boot, "--alter", "--topic", "t",
                    "--partitions", "4").returncode == 0
        assert md.get_topic("t").partitions == 4
        again = _run(kafka, "kafka-topics.sh", *boot, "--create", "--topic", "t")
        assert again.returncode == 1 and "already exists" in again.stderr
        assert _run(kafka, "kafka-topics.sh", *boot, "--delete", "--topic", "t").returncode == 0
        assert "t" not in {t.name for t in md.list_topics()}
    finally:
        md.close()


def test_kafka_acls_adds_and_removes(agent: AgentProcess, tmp_path: Path) -> None:
    kafka = kafka_scripts.install(tmp_path / "kafka")
    boot = ("--bootstrap-server", agent.bootstrap)
    acl = ("--deny-principal", "User:*", "--operation", "Read", "--deny-host", "*",
           "--topic", "t")
    assert _run(kafka, "kafka-acls.sh", *boot, "--add", *acl).returncode == 0
    admin = AdminClient({"bootstrap.servers": agent.bootstrap})
    anything = cast(str, None)  # a filter's "any" (the stubs say str)
    every = AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY, anything,
                             anything, AclOperation.ANY, AclPermissionType.ANY)
    (found,) = admin.describe_acls(every).result(30)
    assert (found.name, found.principal, found.operation, found.permission_type) == (
        "t", "User:*", AclOperation.READ, AclPermissionType.DENY)
    assert _run(kafka, "kafka-acls.sh", *boot, "--remove", "--force", *acl).returncode == 0
    assert admin.describe_acls(every).result(30) == []
