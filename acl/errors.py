"""Errors of the ACL model."""

from __future__ import annotations


class AclError(Exception):
    """Base of the ACL errors."""

    retriable = False


class InvalidAclError(AclError):
    """A binding or filter Kafka refuses (INVALID_REQUEST): an UNKNOWN or ANY field where a
    specific one is needed, an empty name, a CLUSTER name other than kafka-cluster."""
