"""ACL bindings in the metadata store (metadata/acls.py), on SQLite and PostgreSQL: stored
once, deleted by filters in one transaction, the version moving with every change, and a
watcher on another handle hearing ACL changes (not data commits) on its ACL callback."""

from __future__ import annotations

import pytest

from acl import Acl, AclFilter, InvalidAclError, Operation, PatternType, Permission, ResourceType
from clock import ManualClock
from metadata import MetadataStore

from .metadata_helpers import chunk, commit
from .test_metadata_notify import Calls

R, P, Op = ResourceType, PatternType, Operation
READ_T = Acl(R.TOPIC, "t", P.LITERAL, "User:alice", "*", Op.READ, Permission.ALLOW)
WRITE_PRE = Acl(R.TOPIC, "t", P.PREFIXED, "User:bob", "10.0.0.1", Op.WRITE, Permission.DENY)
GROUP_G = Acl(R.GROUP, "g", P.LITERAL, "User:*", "*", Op.ALL, Permission.ALLOW)


def test_create_list_delete(metadata_url: str, clock: ManualClock) -> None:
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    try:
        start, listed = md.list_acls()
        assert listed == []
        md.create_acls([READ_T, WRITE_PRE, READ_T])
        md.create_acls([READ_T, GROUP_G])  # READ_T again: kept once
        version, listed = md.list_acls()
        assert listed == [READ_T, WRITE_PRE, GROUP_G]  # enums come back as enums
        assert listed[1].permission is Permission.DENY
        assert version == start + 2 == md.acl_version()
        matched = md.delete_acls([AclFilter(R.TOPIC), AclFilter(principal="User:alice"),
                                  AclFilter(R.CLUSTER)])
        assert matched == [[READ_T, WRITE_PRE], [READ_T], []]
        assert md.list_acls() == (version + 1, [GROUP_G])
        assert md.delete_acls([AclFilter(R.TOPIC)]) == [[]]
        assert md.acl_version() == version + 2
    finally:
        md.close()


def test_invalid_binding_stores_nothing(metadata_url: str, clock: ManualClock) -> None:
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    try:
        version = md.acl_version()
        bad = Acl(R.CLUSTER, "c", P.LITERAL, "User:a", "*", Op.ALTER, Permission.ALLOW)
        with pytest.raises(InvalidAclError, match="kafka-cluster"):
            md.create_acls([READ_T, bad])
        assert md.list_acls() == (version, [])
    finally:
        md.close()


def test_watcher_hears_acl_changes_on_its_own_callback(metadata_url: str,
                                                       clock: ManualClock) -> None:
    writer = MetadataStore.open(metadata_url, clock=clock, create=True)
    watching = MetadataStore.open(metadata_url, clock=clock, create=True)
    writer.create_topic("t", 1)
    data, acls = Calls(), Calls()
    try:
        with watching.watch_commits(data, acls):
            assert acls.wait_more(0) and data.wait_more(0)  # the (re)connect's wake-up
            for i in range(2):
                mark = acls.n
                writer.create_acls([Acl(R.TOPIC, f"t{i}", P.LITERAL, "User:a", "*", Op.READ,
                                        Permission.ALLOW)])
                assert acls.wait_more(mark), f"ACL change {i} not heard"
            mark = acls.n
            writer.delete_acls([AclFilter()])
            assert acls.wait_more(mark)
            mark = data.n
            commit(writer, "k", [chunk("t", 0, span=2)])
            assert data.wait_more(mark)
    finally:
        writer.close()
        watching.close()
