"""Kafka's authorization: the ACL model (resource and pattern types, operations,
permissions, bindings and filters) and a StandardAuthorizer snapshot deciding from them.
Pure: the metadata store keeps the bindings, the agent builds snapshots from them."""

from .authorizer import Authorizer, parse_super_users
from .errors import AclError, InvalidAclError
from .model import (
    CLUSTER_NAME,
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
    check_filter,
    check_new,
    check_principal,
    from_code,
    from_name,
)

__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "Acl",
    "AclError",
    "AclFilter",
    "Authorizer",
    "InvalidAclError",
    "Operation",
    "PatternType",
    "Permission",
    "ResourceType",
    "bitfield",
    "check_filter",
    "check_new",
    "check_principal",
    "from_code",
    "from_name",
    "parse_super_users",
]
