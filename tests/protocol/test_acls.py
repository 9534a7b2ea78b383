"""The ACL APIs (CreateAcls, DescribeAcls, DeleteAcls) through real admin clients against
real `silt agent` processes: SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_
FAILED without ALTER/DESCRIBE on the cluster, INVALID_REQUEST for bad bindings, and a change
made through one agent seen by another within a second (its commit watcher)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import cast

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
)
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KResourceType
from kafka.errors import ClusterAuthorizationFailedError, NoError, SecurityDisabledError

import acl
from agent.config import STANDARD_AUTHORIZER

from .server import AgentProcess, Backend

AUTHORIZER = {"SILT_AGENT_AUTHORIZER_CLASS_NAME": STANDARD_AUTHORIZER}
ANON = "User:ANONYMOUS"
PROPAGATION_S = 1.0


def grant_cluster(backend: Backend, *ops: acl.Operation) -> None:
    """ALLOW User:ANONYMOUS `ops` on the cluster, straight in the metadata store (as `silt
    acls add` does): the admin clients' way in."""
    md = backend.metadata()
    try:
        md.create_acls([acl.Acl(acl.ResourceType.CLUSTER, acl.CLUSTER_NAME,
                                acl.PatternType.LITERAL, ANON, "*", op, acl.Permission.ALLOW)
                        for op in ops])
    finally:
        md.close()


def binding(topic: str, op: AclOperation = AclOperation.READ) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, ANON, "*", op,
                      AclPermissionType.ALLOW)


def bindings(rtype: ResourceType, name: str | None = None,
             pattern: ResourcePatternType = ResourcePatternType.ANY) -> AclBindingFilter:
    """A filter of every binding of a resource (None: any name; confluent-kafka's stubs
    type the names str, its code takes None as Kafka's "any")."""
    return AclBindingFilter(rtype, cast(str, name), pattern, cast(str, None),
                            cast(str, None), AclOperation.ANY, AclPermissionType.ANY)


TOPICS = bindings(ResourceType.TOPIC)


@pytest.fixture
def secured(backend: Backend) -> Iterator[tuple[AgentProcess, AgentProcess]]:
    """Two agents with the StandardAuthorizer, User:ANONYMOUS allowed ALTER and DESCRIBE
    on the cluster."""
    grant_cluster(backend, acl.Operation.ALTER, acl.Operation.DESCRIBE)
    procs = [backend.agent(f"agent{i}", AUTHORIZER).start() for i in (0, 1)]
    yield procs[0], procs[1]
    for proc in procs:
        proc.terminate()


def test_without_an_authorizer_security_is_disabled(agent_proc: AgentProcess) -> None:
    admin = AdminClient({"bootstrap.servers": agent_proc.bootstrap})
    with pytest.raises(KafkaException) as created:
        admin.create_acls([binding("t")])[binding("t")].result(30)
    assert created.value.args[0].name() == "SECURITY_DISABLED"
    # (confluent-kafka's describe_acls drops the response's error: kafka-python's keeps it)
    kadmin = KafkaAdminClient(bootstrap_servers=agent_proc.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError):
            kadmin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                           ResourcePatternFilter(KResourceType.ANY, None,
                                                                 ACLResourcePatternType.ANY)))
    finally:
        kadmin.close()
    with pytest.raises(KafkaException) as deleted:
        admin.delete_acls([TOPICS])[TOPICS].result(30)
    assert deleted.value.args[0].name() == "SECURITY_DISABLED"


def test_cluster_authorization_is_needed(backend: Backend) -> None:
    """DESCRIBE on the cluster allows DescribeAcls only; CreateAcls and DeleteAcls need
    ALTER (CLUSTER_AUTHORIZATION_FAILED, nothing stored)."""
    grant_cluster(backend, acl.Operation.DESCRIBE)
    proc = backend.agent("agent", AUTHORIZER).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        with pytest.raises(KafkaException) as created:
            admin.create_acls([binding("t")])[binding("t")].result(30)
        assert created.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
        with pytest.raises(KafkaException) as deleted:
            admin.delete_acls([TOPICS])[TOPICS].result(30)
        assert deleted.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
        assert admin.describe_acls(TOPICS).result(30) == []
        kadmin = KafkaAdminClient(bootstrap_servers=proc.bootstrap)
        try:
            result = kadmin.create_acls([ACL(ANON, "*", ACLOperation.READ,
                                             ACLPermissionType.ALLOW,
                                             ResourcePattern(KResourceType.TOPIC, "t"))])
            assert result["failed"] == [ClusterAuthorizationFailedError]
        finally:
            kadmin.close()
    finally:
        proc.terminate()
    md = backend.metadata()
    try:
        assert [a.resource_type for a in md.list_acls()[1]] == [acl.ResourceType.CLUSTER]
    finally:
        md.close()


def test_create_describe_delete_across_agents(
        secured: tuple[AgentProcess, AgentProcess]) -> None:
    one, other = secured
    admin = AdminClient({"bootstrap.servers": one.bootstrap})
    watcher = AdminClient({"bootstrap.servers": other.bootstrap})
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL,
                     ANON, "*", AclOperation.ALTER, AclPermissionType.ALLOW)
    prefixed = AclBinding(ResourceType.GROUP, "app-", ResourcePatternType.PREFIXED, ANON,
                          "10.0.0.1", AclOperation.READ, AclPermissionType.DENY)
    futures = admin.create_acls([binding("t"), prefixed, bad])
    start = time.monotonic()
    assert futures[binding("t")].result(30) is None
    assert futures[prefixed].result(30) is None
    with pytest.raises(KafkaException) as refused:
        futures[bad].result(30)
    assert refused.value.args[0].name() == "INVALID_REQUEST"
    assert "kafka-cluster" in refused.value.args[0].str()
    # The agent that made the change answers with it at once; the other within a second.
    assert admin.describe_acls(TOPICS).result(30) == [binding("t")]
    while watcher.describe_acls(TOPICS).result(30) != [binding("t")]:
        assert time.monotonic() - start < PROPAGATION_S + 0.5, "not seen by the other agent"
        time.sleep(0.02)
    groups = bindings(ResourceType.GROUP, "app-1", ResourcePatternType.MATCH)
    assert admin.describe_acls(groups).result(30) == [prefixed]

    # kafka-python's admin: describe (MATCH), create, delete through the other agent. (The
    # loop above may have been answered by either agent: confluent-kafka's admin sends
    # DescribeAcls to any broker it knows; this one goes to `other`, its bootstrap.)
    kadmin = KafkaAdminClient(bootstrap_servers=other.bootstrap)
    try:
        start = time.monotonic()
        while True:
            found, error = kadmin.describe_acls(ACLFilter(
                None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                ResourcePatternFilter(KResourceType.TOPIC, "t", ACLResourcePatternType.MATCH)))
            assert error is NoError
            if found or time.monotonic() - start > PROPAGATION_S + 0.5:
                break
            time.sleep(0.02)
        assert [(a.resource_pattern.resource_name, a.operation) for a in found] == [
            ("t", ACLOperation.READ)]
        result = kadmin.create_acls([ACL(ANON, "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                                         ResourcePattern(KResourceType.TOPIC, "t"))])
        assert not result["failed"]
        deleted = kadmin.delete_acls([ACLFilter(
            ANON, None, ACLOperation.ANY, ACLPermissionType.ALLOW,
            ResourcePatternFilter(KResourceType.TOPIC, "t", ACLResourcePatternType.LITERAL))])
        (_, matches, failure), = deleted
        assert failure is NoError
        assert sorted(m.operation for m in matches) == [ACLOperation.READ,
                                                          ACLOperation.WRITE]
    finally:
        kadmin.close()
    start = time.monotonic()
    while admin.describe_acls(TOPICS).result(30) != []:
        assert time.monotonic() - start < PROPAGATION_S + 0.5, "deletion not seen"
        time.sleep(0.02)
    # Left: the group's and the two on the cluster.
    assert len(admin.describe_acls(bindings(ResourceType.ANY)).result(30)) == 3
