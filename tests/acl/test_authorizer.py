"""The authorizer against Kafka's StandardAuthorizer semantics, table-driven: which ACLs
apply to a resource, DENY over ALLOW, implied operations, principals and hosts, super users,
the no-ACL default, authorized-operations bitfields, authorizeByResourceType and filters."""

from __future__ import annotations

import pytest

from acl import (
    CLUSTER_NAME,
    Acl,
    AclFilter,
    Authorizer,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    bitfield,
    check_filter,
    check_new,
    from_code,
    from_name,
    parse_super_users,
)

Op, R, P = Operation, ResourceType, PatternType
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER = "10.0.0.1", "10.0.0.2"
LIT, PRE = P.LITERAL, P.PREFIXED


def acl(name: str, op: Operation = Op.READ, perm: Permission = ALLOW, *,
        pattern: PatternType = LIT, principal: str = ALICE, host: str = "*",
        rtype: ResourceType = R.TOPIC) -> Acl:
    return Acl(rtype, name, pattern, principal, host, op, perm)


# (ACLs, operation, topic name, allowed?) for ALICE from HOST, default deny.
CASES = [
    pytest.param([], Op.READ, "t", False, id="no-acls-default-deny"),
    pytest.param([acl("t")], Op.READ, "t", True, id="literal-allow"),
    pytest.param([acl("t")], Op.WRITE, "t", False, id="other-operation"),
    pytest.param([acl("t")], Op.READ, "t2", False, id="literal-is-not-prefix"),
    pytest.param([acl("t", principal=BOB)], Op.READ, "t", False, id="other-principal"),
    pytest.param([acl("t", principal="User:*")], Op.READ, "t", True, id="wildcard-principal"),
    pytest.param([acl("t", host=HOST)], Op.READ, "t", True, id="exact-host"),
    pytest.param([acl("t", host=OTHER)], Op.READ, "t", False, id="other-host"),
    pytest.param([acl("*")], Op.READ, "anything", True, id="wildcard-resource"),
    pytest.param([acl("fo", pattern=PRE)], Op.READ, "foo", True, id="prefix"),
    pytest.param([acl("foo", pattern=PRE)], Op.READ, "foo", True, id="prefix-whole-name"),
    pytest.param([acl("foo", pattern=PRE)], Op.READ, "fo", False, id="prefix-longer-than-name"),
    pytest.param([acl("f", pattern=PRE), acl("fo", pattern=PRE, perm=DENY)], Op.READ, "foo",
                 False, id="prefix-deny-wins"),
    pytest.param([acl("foo"), acl("*", perm=DENY)], Op.READ, "foo", False,
                 id="wildcard-deny-wins"),
    pytest.param([acl("foo"), acl("foo", perm=DENY, principal="User:*")], Op.READ, "foo",
                 False, id="wildcard-principal-deny-wins"),
    pytest.param([acl("foo"), acl("foo", perm=DENY, host=OTHER)], Op.READ, "foo", True,
                 id="deny-from-other-host"),
    pytest.param([acl("t", Op.READ)], Op.DESCRIBE, "t", True, id="read-implies-describe"),
    pytest.param([acl("t", Op.WRITE)], Op.DESCRIBE, "t", True, id="write-implies-describe"),
    pytest.param([acl("t", Op.DELETE)], Op.DESCRIBE, "t", True, id="delete-implies-describe"),
    pytest.param([acl("t", Op.ALTER)], Op.DESCRIBE, "t", True, id="alter-implies-describe"),
    pytest.param([acl("t", Op.CREATE)], Op.DESCRIBE, "t", False, id="create-not-describe"),
    pytest.param([acl("t", Op.DESCRIBE)], Op.READ, "t", False, id="describe-not-read"),
    pytest.param([acl("t", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS, "t", True,
                 id="alter-configs-implies-describe-configs"),
    pytest.param([acl("t", Op.ALTER_CONFIGS)], Op.DESCRIBE, "t", False,
                 id="alter-configs-not-describe"),
    pytest.param([acl("t", Op.READ), acl("t", Op.READ, DENY)], Op.DESCRIBE, "t", True,
                 id="deny-read-does-not-deny-describe"),
    pytest.param([acl("t", Op.ALL)], Op.DELETE, "t", True, id="all-allows"),
    pytest.param([acl("t", Op.ALL), acl("t", Op.ALL, DENY)], Op.READ, "t", False,
                 id="deny-all-denies"),
    pytest.param([acl("t", rtype=R.GROUP)], Op.READ, "t", False, id="other-resource-type"),
]


@pytest.mark.parametrize(("acls", "op", "name", "allowed"), CASES)
def test_decision(acls: list[Acl], op: Operation, name: str, allowed: bool) -> None:
    assert Authorizer(acls).authorize(ALICE, HOST, op, R.TOPIC, name) is allowed


def test_no_acl_default_applies_only_to_resources_without_acls() -> None:
    """allow.everyone.if.no.acl.found: a resource with ACLs for anyone else is denied."""
    auth = Authorizer([acl("t", principal=BOB)], allow_if_no_acl=True)
    assert auth.authorize(ALICE, HOST, Op.READ, R.TOPIC, "other")
    assert not auth.authorize(ALICE, HOST, Op.READ, R.TOPIC, "t")
    # A prefixed or wildcard ACL makes every resource it covers one "with ACLs".
    auth = Authorizer([acl("p", pattern=PRE, principal=BOB)], allow_if_no_acl=True)
    assert not auth.authorize(ALICE, HOST, Op.READ, R.TOPIC, "pq")
    assert auth.authorize(ALICE, HOST, Op.READ, R.TOPIC, "q")


def test_super_users_are_allowed_despite_deny() -> None:
    auth = Authorizer([acl("t", Op.ALL, DENY)], parse_super_users(" User:alice ; User:x;"))
    assert auth.super_users == {ALICE, "User:x"}
    assert auth.authorize(ALICE, HOST, Op.DELETE, R.TOPIC, "t")
    assert not auth.authorize(BOB, HOST, Op.DELETE, R.TOPIC, "t")


def test_authorized_operations_bitfield() -> None:
    auth = Authorizer([acl("t", Op.READ), acl("t", Op.ALTER_CONFIGS)])
    ops = auth.authorized_operations(ALICE, HOST, R.TOPIC, "t")
    assert ops == bitfield([Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
    assert ops == (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11)
    cluster = Authorizer([acl(CLUSTER_NAME, Op.ALL, rtype=R.CLUSTER)])
    assert cluster.authorized_operations(ALICE, HOST, R.CLUSTER, CLUSTER_NAME) == bitfield(
        [Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
         Op.ALTER, Op.DESCRIBE])
    assert Authorizer().authorized_operations(ALICE, HOST, R.GROUP, "g") == 0


# (ACLs, allowed?) for authorize_any(ALICE, HOST, WRITE, TOPIC): Kafka's
# AuthorizerTest authorizeByResourceType cases.
ANY_CASES = [
    pytest.param([], False, id="none"),
    pytest.param([acl("t", Op.WRITE)], True, id="one-literal"),
    pytest.param([acl("t", Op.READ)], False, id="other-operation"),
    pytest.param([acl("t", Op.ALL)], True, id="all"),
    pytest.param([acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)], False, id="literal-denied"),
    pytest.param([acl("t", Op.WRITE), acl("t", Op.WRITE, DENY, pattern=PRE)], False,
                 id="prefix-deny-dominates"),
    pytest.param([acl("tx", Op.WRITE), acl("ty", Op.WRITE, DENY)], True, id="other-denied"),
    pytest.param([acl("t", Op.WRITE, pattern=PRE), acl("t", Op.WRITE, DENY)], True,
                 id="literal-deny-does-not-dominate-prefix"),
    pytest.param([acl("*", Op.WRITE), acl("t", Op.WRITE, DENY)], True, id="wildcard-allow"),
    pytest.param([acl("t", Op.WRITE), acl("*", Op.WRITE, DENY)], False, id="wildcard-deny"),
    pytest.param([acl("t", Op.WRITE, host=OTHER)], False, id="other-host"),
    pytest.param([acl("t", Op.WRITE, principal="User:*")], True, id="wildcard-principal"),
]


@pytest.mark.parametrize(("acls", "allowed"), ANY_CASES)
def test_authorize_any(acls: list[Acl], allowed: bool) -> None:
    assert Authorizer(acls).authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC) is allowed


def test_authorize_any_super_user_and_default() -> None:
    assert Authorizer([acl("t", Op.WRITE, DENY)], [ALICE]).authorize_any(
        ALICE, HOST, Op.WRITE, R.TOPIC)
    assert Authorizer(allow_if_no_acl=True).authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC)


T_LIT, T_PRE, T_ANY = acl("foo"), acl("fo", pattern=PRE), acl("*")
FILTER_CASES = [
    pytest.param(AclFilter(), {T_LIT, T_PRE, T_ANY}, id="any"),
    pytest.param(AclFilter(R.TOPIC, "foo", P.LITERAL), {T_LIT}, id="literal-exact"),
    pytest.param(AclFilter(R.TOPIC, "foo", P.ANY), {T_LIT}, id="any-pattern-exact-name"),
    pytest.param(AclFilter(R.TOPIC, "foo", P.MATCH), {T_LIT, T_PRE, T_ANY}, id="match"),
    pytest.param(AclFilter(R.TOPIC, "fox", P.MATCH), {T_PRE, T_ANY}, id="match-prefix"),
    pytest.param(AclFilter(R.TOPIC, None, P.PREFIXED), {T_PRE}, id="prefixed-any-name"),
    pytest.param(AclFilter(R.GROUP), set(), id="other-type"),
    pytest.param(AclFilter(principal=BOB), set(), id="other-principal"),
    pytest.param(AclFilter(operation=Op.READ, permission=ALLOW, host="*"),
                 {T_LIT, T_PRE, T_ANY}, id="entry"),
]


@pytest.mark.parametrize(("flt", "expected"), FILTER_CASES)
def test_filters(flt: AclFilter, expected: set[Acl]) -> None:
    assert set(Authorizer([T_LIT, T_PRE, T_ANY]).acls(flt)) == expected


@pytest.mark.parametrize(("binding", "message"), [
    (acl("t", rtype=R.ANY), "Invalid resourceType ANY"),
    (acl("t", rtype=R.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl("t", pattern=P.MATCH), "Invalid patternType MATCH"),
    (acl("t", Op.ANY), "Invalid operation ANY"),
    (acl("t", perm=Permission.ANY), "Invalid permissionType ANY"),
    (acl("x", rtype=R.CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(""), "Invalid empty resource name"),
    (acl("t", principal="alice"), "principalType:principalName"),
])
def test_check_new_refuses(binding: Acl, message: str) -> None:
    with pytest.raises(InvalidAclError, match=message):
        check_new(binding)


def test_check_new_and_filter_accept() -> None:
    check_new(acl(CLUSTER_NAME, Op.ALTER, rtype=R.CLUSTER))
    check_new(acl("t", pattern=PRE, perm=DENY))
    check_filter(AclFilter())
    for bad in (AclFilter(R.UNKNOWN), AclFilter(pattern_type=P.UNKNOWN),
                AclFilter(operation=Op.UNKNOWN), AclFilter(permission=Permission.UNKNOWN)):
        with pytest.raises(InvalidAclError):
            check_filter(bad)


def test_codes_and_names() -> None:
    assert from_code(Operation, 12) is Op.IDEMPOTENT_WRITE
    assert from_code(Operation, 99) is Op.UNKNOWN
    assert from_code(ResourceType, 5) is R.TRANSACTIONAL_ID
    assert from_name(Operation, "describe-configs") is Op.DESCRIBE_CONFIGS
    assert from_name(PatternType, "prefixed") is PRE
    assert from_name(Permission, "nope") is Permission.UNKNOWN


def test_duplicates_kept_once() -> None:
    assert len(Authorizer([T_LIT, T_LIT, T_PRE])) == 2
