"""The agent's authorizer (agent/protocol/authz.py): decisions for the connection's session,
everything allowed without an authorizer, and a change made through another metadata handle
(another agent) applied within a second through the commit watcher, on SQLite and
PostgreSQL."""

from __future__ import annotations

import time

from acl import Acl, AclFilter, Operation, PatternType, Permission, ResourceType
from agent.config import STANDARD_AUTHORIZER, AgentConfig
from agent.protocol.authz import Authorization
from agent.protocol.session import SESSION, Session
from metadata import MetadataStore

R, Op = ResourceType, Operation
READ_T = Acl(R.TOPIC, "t", PatternType.LITERAL, "User:ANONYMOUS", "10.1.1.1", Op.READ,
             Permission.ALLOW)
ON = AgentConfig(authorizer_class_name=STANDARD_AUTHORIZER)


def test_without_an_authorizer_everything_is_allowed() -> None:
    authz = Authorization(AgentConfig())
    assert not authz.enabled
    assert authz.allows(Op.DELETE, R.TOPIC, "t")
    assert authz.allowed(Op.READ, R.TOPIC, ["a", "b", "a"]) == {"a", "b"}
    assert authz.allows_any(Op.WRITE, R.TOPIC)
    assert authz.operations(R.TOPIC, "t") == sum(1 << c for c in (3, 4, 5, 6, 7, 8, 10, 11))
    assert authz.operations(R.GROUP, "g") == sum(1 << c for c in (3, 6, 8, 10, 11))


def test_decisions_follow_the_session() -> None:
    authz = Authorization(AgentConfig(authorizer_class_name=STANDARD_AUTHORIZER,
                                      super_users="User:root"))
    authz._swap(1, [READ_T])
    token = SESSION.set(Session(host="10.1.1.1"))
    try:
        assert authz.allows(Op.READ, R.TOPIC, "t")
        assert authz.allows(Op.DESCRIBE, R.TOPIC, "t")  # implied
        assert not authz.allows(Op.WRITE, R.TOPIC, "t")
        assert authz.allowed(Op.READ, R.TOPIC, ["t", "u"]) == {"t"}
        assert not authz.allows_any(Op.WRITE, R.TOPIC)
        SESSION.set(Session(host="10.1.1.2"))
        assert not authz.allows(Op.READ, R.TOPIC, "t")
        SESSION.set(Session(principal="User:root", host="10.1.1.2"))
        assert authz.allows(Op.DELETE, R.CLUSTER, "kafka-cluster")
    finally:
        SESSION.reset(token)


def test_another_handles_change_is_applied_within_a_second(metadata_url: str) -> None:
    admin = MetadataStore.open(metadata_url, create=True)
    agent_md = MetadataStore.open(metadata_url, create=True)
    authz = Authorization(ON)
    token = SESSION.set(Session(host="10.1.1.1"))
    try:
        authz.start(agent_md)
        with agent_md.watch_commits(lambda: None, authz.changed):
            assert not authz.allows(Op.READ, R.TOPIC, "t")
            admin.create_acls([READ_T])
            start = time.monotonic()
            while not authz.allows(Op.READ, R.TOPIC, "t"):
                assert time.monotonic() - start < 1.0, "ACL change not applied within 1 s"
                time.sleep(0.005)
            admin.delete_acls([AclFilter(R.TOPIC)])
            start = time.monotonic()
            while authz.allows(Op.READ, R.TOPIC, "t"):
                assert time.monotonic() - start < 1.0, "ACL deletion not applied within 1 s"
                time.sleep(0.005)
    finally:
        SESSION.reset(token)
        authz.stop()
        admin.close()
        agent_md.close()
