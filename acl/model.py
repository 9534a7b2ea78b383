"""Kafka's ACL vocabulary: resource types, pattern types, operations, permissions (with their
wire codes), an ACL binding, a binding filter, and the checks a new binding or a filter must
pass before it is stored or used (Kafka's AclControlManager and AclApis).

Codes are Kafka's (clients/.../common/acl and common/resource): a code this server does not
know reads as UNKNOWN, as Kafka's `fromCode` does, and is refused by the checks.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

from .errors import InvalidAclError

CLUSTER_NAME: Final = "kafka-cluster"  # the only name of the CLUSTER resource
WILDCARD: Final = "*"  # a LITERAL resource name or a host matching every one
WILDCARD_PRINCIPAL: Final = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, the name matched exactly
    MATCH = 2  # filters only: every pattern that would match the name
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


E = TypeVar("E", ResourceType, PatternType, Operation, Permission)


def from_code(kind: type[E], code: int) -> E:
    """The member of `kind` with wire code `code`, UNKNOWN for any other (Kafka's fromCode)."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def from_name(kind: type[E], name: str) -> E:
    """The member of `kind` named `name` (any case, '-' for '_'), UNKNOWN for any other."""
    try:
        return kind[name.strip().upper().replace("-", "_")]
    except KeyError:
        return kind(0)


T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
Op = Operation
# The operations each resource type has (Kafka's AclEntry.supportedOperations): what an
# authorized-operations bitfield is computed over.
SUPPORTED: Final[dict[ResourceType, tuple[Operation, ...]]] = {
    T: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS),
    G: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    C: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
        Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


def bitfield(operations: Iterable[Operation]) -> int:
    """Kafka's 32-bit field of operations (Utils.to32BitField: bit `code` set for each)."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field


@dataclass(frozen=True, slots=True)
class Acl:
    """One ACL binding: a resource pattern (type, name, LITERAL or PREFIXED) and an entry
    (principal "type:name", host, operation, ALLOW or DENY)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        return (f"{self.permission.name} {self.principal} {self.operation.name} from"
                f" {self.host} on {self.resource_type.name}:{self.pattern_type.name}:"
                f"{self.name}")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A binding filter (DescribeAcls, DeleteAcls): None and ANY match anything; a MATCH
    pattern type matches every pattern that would apply to the name (LITERAL equal or `*`,
    PREFIXED a prefix of it). Kafka's AclBindingFilter.matches."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: Acl) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern != acl.pattern_type:
            return False
        if self.name is not None:
            if pattern in (PatternType.ANY, acl.pattern_type):
                if self.name != acl.name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:  # MATCH
                if self.name != acl.name and acl.name != WILDCARD:
                    return False
            elif not self.name.startswith(acl.name):  # MATCH, PREFIXED
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != Operation.ANY and self.operation != acl.operation:
            return False
        return self.permission == Permission.ANY or self.permission == acl.permission


def check_principal(principal: str) -> None:
    """A principal is "type:name" (Kafka's SecurityUtils.parseKafkaPrincipal)."""
    if ":" not in principal:
        raise InvalidAclError(f"expected a string in format principalType:principalName but"
                              f" got {principal}")


def check_new(acl: Acl) -> None:
    """Refuse a binding Kafka refuses to create (AclControlManager.validateNewAcl and
    AclApis.handleCreateAcls): InvalidAclError (INVALID_REQUEST)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidAclError(f"Invalid operation {acl.operation.name}")
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAclError(f"Invalid permissionType {acl.permission.name}")
    if acl.resource_type == ResourceType.CLUSTER and acl.name != CLUSTER_NAME:
        raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not acl.name:
        raise InvalidAclError("Invalid empty resource name")
    check_principal(acl.principal)


def check_filter(flt: AclFilter) -> None:
    """Refuse a filter with an UNKNOWN field (AclControlManager.validateFilter)."""
    if flt.resource_type == ResourceType.UNKNOWN or flt.pattern_type == PatternType.UNKNOWN:
        raise InvalidAclError("Unknown patternFilter.")
    if flt.operation == Operation.UNKNOWN or flt.permission == Permission.UNKNOWN:
        raise InvalidAclError("Unknown entryFilter.")
