"""Kafka's StandardAuthorizer as an immutable snapshot: decisions from ACLs indexed by
resource, read by many threads without locks (a change builds a new snapshot, swapped in
whole, as StandardAuthorizer swaps its StandardAuthorizerData).

A decision (StandardAuthorizerData.authorize and findResult):
- a super user (`super.users`, "User:alice;User:bob") is allowed everything;
- the ACLs that apply to a resource are the LITERAL ones of its name, the LITERAL `*` of its
  type and the PREFIXED ones whose name starts it; of those, the ones of the principal or
  `User:*`, from the host or `*`, for the operation or ALL, decide: any DENY denies, else any
  ALLOW allows; an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and one of
  ALTER_CONFIGS allows DESCRIBE_CONFIGS (a DENY implies nothing);
- none apply: denied if the resource has ACLs (for anyone), else the default
  (`allow.everyone.if.no.acl.found`, false).

Indexes: LITERAL bindings by (type, name), PREFIXED by (type, prefix) with the prefix
lengths in use per type, so a decision is a few dict lookups and a short scan of the
bindings that name the resource, however many ACLs exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .model import (
    SUPPORTED,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    bitfield,
)

Op = Operation
_IMPLIES_DESCRIBE: Final = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
_IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})
_ALLOW, _DENY = Permission.ALLOW, Permission.DENY

Key = tuple[ResourceType, str]


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by ';' (StandardAuthorizer.getConfiguredSuperUsers)."""
    return frozenset(v.strip() for v in value.split(";") if v.strip())


def _applies(acl: Acl, principal: str, host: str, op: Operation) -> Permission | None:
    """What `acl` (of a matching resource) says about `op` by `principal` from `host`, None
    if it does not apply (StandardAuthorizerData.findResult)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    granted = acl.operation
    if granted != Op.ALL and granted != op:
        if acl.permission != _ALLOW:
            return None
        if op == Op.DESCRIBE:
            if granted not in _IMPLIES_DESCRIBE:
                return None
        elif op != Op.DESCRIBE_CONFIGS or granted not in _IMPLIES_DESCRIBE_CONFIGS:
            return None
    return acl.permission


class Authorizer:
    """A snapshot of the ACLs with the authorizer's settings. Thread-safe (immutable)."""

    __slots__ = ("_all", "_default", "_literal", "_prefix_lengths", "_prefixed",
                 "super_users")

    def __init__(self, acls: Iterable[Acl] = (), super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self._default = allow_if_no_acl
        literal: dict[Key, list[Acl]] = {}
        prefixed: dict[Key, list[Acl]] = {}
        lengths: dict[ResourceType, set[int]] = {}
        unique = dict.fromkeys(acls)  # a binding once, in the order given
        for acl in unique:
            key = (acl.resource_type, acl.name)
            if acl.pattern_type == PatternType.PREFIXED:
                prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.name))
            else:
                literal.setdefault(key, []).append(acl)
        self._all: tuple[Acl, ...] = tuple(unique)
        self._literal = {k: tuple(v) for k, v in literal.items()}
        self._prefixed = {k: tuple(v) for k, v in prefixed.items()}
        self._prefix_lengths = {k: tuple(sorted(v)) for k, v in lengths.items()}

    def with_acls(self, acls: Iterable[Acl]) -> Authorizer:
        """A snapshot of `acls` with this one's settings."""
        return Authorizer(acls, self.super_users, self._default)

    def __len__(self) -> int:
        return len(self._all)

    def _sections(self, rtype: ResourceType, name: str) -> list[tuple[Acl, ...]]:
        """The bindings whose pattern matches the resource (rtype, name)."""
        found = []
        if (acls := self._literal.get((rtype, name))) is not None:
            found.append(acls)
        if name != WILDCARD and (acls := self._literal.get((rtype, WILDCARD))) is not None:
            found.append(acls)
        prefixed = self._prefixed
        for n in self._prefix_lengths.get(rtype, ()):
            if n > len(name):
                break
            if (acls := prefixed.get((rtype, name[:n]))) is not None:
                found.append(acls)
        return found

    def authorize(self, principal: str, host: str, op: Operation, rtype: ResourceType,
                  name: str) -> bool:
        """Whether `principal` connected from `host` may do `op` on the resource."""
        if principal in self.super_users:
            return True
        sections = self._sections(rtype, name)
        if not sections:
            return self._default
        allowed = False
        for acls in sections:
            for acl in acls:
                result = _applies(acl, principal, host, op)
                if result is _DENY:
                    return False
                if result is _ALLOW:
                    allowed = True
        return allowed

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType,
                              name: str) -> int:
        """The bitfield of `rtype`'s operations the principal may do on the resource
        (AuthHelper.authorizedOperations)."""
        return bitfield(op for op in SUPPORTED[rtype]
                        if self.authorize(principal, host, op, rtype, name))

    def authorize_any(self, principal: str, host: str, op: Operation,
                      rtype: ResourceType) -> bool:
        """Whether the principal may do `op` on at least one resource of `rtype` that no
        DENY covers (Kafka's Authorizer.authorizeByResourceType: an idempotent producer may
        write if it may WRITE some topic)."""
        if self.authorize(principal, host, op, rtype, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[Acl] = []
        for acl in self._all:
            if acl.resource_type != rtype:
                continue
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != op and acl.operation != Op.ALL:
                continue
            if acl.permission == _DENY:
                if acl.pattern_type == PatternType.PREFIXED:
                    deny_prefixed.add(acl.name)
                elif acl.name == WILDCARD:
                    return False
                else:
                    deny_literal.add(acl.name)
            elif acl.permission == _ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.name == WILDCARD:
                    return True
                allow.append(acl)
        for acl in allow:
            if acl.pattern_type == PatternType.LITERAL and acl.name in deny_literal:
                continue
            if not any(acl.name[:n] in deny_prefixed for n in range(1, len(acl.name) + 1)):
                return True
        return False

    def acls(self, flt: AclFilter) -> list[Acl]:
        """The bindings `flt` matches (DescribeAcls)."""
        return [acl for acl in self._all if flt.matches(acl)]

