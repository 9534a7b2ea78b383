"""`silt acls`: add, remove and list ACL bindings (kafka-acls), straight in the metadata
store: no agent needs to run, and every agent applies a change within a second (its commit
watcher). Trust boundary: these commands need the metadata database itself (its URL and
credentials), not a Kafka principal; whoever can write that database can change any ACL,
as whoever can write Kafka's metadata log can.

Resources and flags follow kafka-acls.sh: `--topic`, `--group`, `--transactional-id`,
`--cluster` (repeatable), `--resource-pattern-type`, `--allow-principal` / `--deny-principal`
with `--allow-host` / `--deny-host` (default `*`), `--operation` (repeatable, default ALL).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from acl import (
    CLUSTER_NAME,
    Acl,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    check_principal,
    from_name,
)

from .context import Context, one_line_errors, pass_ctx
from .errors import CommandFailed
from .output import Output, columns, json_option

R = ResourceType
OPERATIONS = [op.name for op in Operation if op not in (Operation.UNKNOWN, Operation.ANY)]


def _resources(topics: tuple[str, ...], groups: tuple[str, ...], txns: tuple[str, ...],
               cluster: bool) -> list[tuple[ResourceType, str]]:
    return ([(R.TOPIC, t) for t in topics] + [(R.GROUP, g) for g in groups]
            + [(R.TRANSACTIONAL_ID, t) for t in txns]
            + ([(R.CLUSTER, CLUSTER_NAME)] if cluster else []))


def _entries(allow: tuple[str, ...], deny: tuple[str, ...], allow_hosts: tuple[str, ...],
             deny_hosts: tuple[str, ...]) -> list[tuple[str, str, Permission]]:
    """(principal, host, permission) of each principal and host given."""
    for principal in allow + deny:
        check_principal(principal)
    return ([(p, h, Permission.ALLOW) for p in allow for h in allow_hosts or ("*",)]
            + [(p, h, Permission.DENY) for p in deny for h in deny_hosts or ("*",)])


def row(acl: Acl) -> dict[str, Any]:
    """An ACL as a JSON-ready row (names as kafka-acls prints them)."""
    return {"resource_type": acl.resource_type.name, "name": acl.name,
            "pattern_type": acl.pattern_type.name, "principal": acl.principal,
            "host": acl.host, "operation": acl.operation.name,
            "permission": acl.permission.name}


def _text(rows: list[dict[str, Any]]) -> Iterator[str]:
    keys = ["resource_type", "name", "pattern_type", "principal", "host", "operation",
            "permission"]
    yield from columns([keys] + [[str(r[k]) for k in keys] for r in rows], indent="")


def _resource_options(fn: Any) -> Any:
    for option in reversed([
        click.option("--topic", "topics", multiple=True, help="A topic (repeatable)."),
        click.option("--group", "groups", multiple=True, help="A consumer group."),
        click.option("--transactional-id", "txns", multiple=True, help="A transactional id."),
        click.option("--cluster", is_flag=True, help="The cluster (kafka-cluster)."),
        click.option("--allow-principal", "allow", multiple=True, metavar="TYPE:NAME"),
        click.option("--deny-principal", "deny", multiple=True, metavar="TYPE:NAME"),
        click.option("--allow-host", "allow_hosts", multiple=True, metavar="IP|*"),
        click.option("--deny-host", "deny_hosts", multiple=True, metavar="IP|*"),
        click.option("--operation", "operations", multiple=True,
                     type=click.Choice(OPERATIONS, case_sensitive=False)),
    ]):
        fn = option(fn)
    return fn


@click.group()
def acls() -> None:
    """Add, remove and list ACLs (the metadata database is the trust boundary)."""


@acls.command("add")
@_resource_options
@click.option("--resource-pattern-type", "pattern", default="literal",
              type=click.Choice(["literal", "prefixed"], case_sensitive=False))
@json_option()
@pass_ctx
@one_line_errors
def acls_add(ctx: Context, topics: tuple[str, ...], groups: tuple[str, ...],
             txns: tuple[str, ...], cluster: bool, allow: tuple[str, ...],
             deny: tuple[str, ...], allow_hosts: tuple[str, ...],
             deny_hosts: tuple[str, ...], operations: tuple[str, ...], pattern: str,
             out: Output) -> None:
    """Add an ACL for each resource, principal, host and operation given."""
    resources = _resources(topics, groups, txns, cluster)
    entries = _entries(allow, deny, allow_hosts, deny_hosts)
    if not resources or not entries:
        raise CommandFailed("give a resource (--topic, --group, --transactional-id,"
                            " --cluster) and --allow-principal or --deny-principal")
    ptype = from_name(PatternType, pattern)
    bindings = [Acl(rtype, name, ptype, principal, host, from_name(Operation, op), perm)
                for rtype, name in resources for principal, host, perm in entries
                for op in operations or ("ALL",)]
    ctx.open(create=True)
    ctx.metadata.create_acls(bindings)  # InvalidAclError: one line
    out.result([row(b) for b in bindings], _text)


@acls.command("remove")
@_resource_options
@click.option("--resource-pattern-type", "pattern", default="literal",
              type=click.Choice(["any", "match", "literal", "prefixed"], case_sensitive=False))
@json_option()
@pass_ctx
@one_line_errors
def acls_remove(ctx: Context, topics: tuple[str, ...], groups: tuple[str, ...],
                txns: tuple[str, ...], cluster: bool, allow: tuple[str, ...],
                deny: tuple[str, ...], allow_hosts: tuple[str, ...],
                deny_hosts: tuple[str, ...], operations: tuple[str, ...], pattern: str,
                out: Output) -> None:
    """Remove the ACLs of the resources given (those of the principals, hosts and
    operations given, if any); prints what was removed."""
    resources = _resources(topics, groups, txns, cluster)
    if not resources:
        raise CommandFailed("give a resource (--topic, --group, --transactional-id,"
                            " --cluster)")
    ptype = from_name(PatternType, pattern)
    entries: list[tuple[str | None, str | None, Permission]] = [
        *_entries(allow, deny, allow_hosts, deny_hosts)]
    if not entries:
        entries = [(None, None, Permission.ANY)]
    filters = [AclFilter(rtype, name, ptype, principal, host if (allow_hosts or deny_hosts)
                         else None, from_name(Operation, op) if operations else Operation.ANY,
                         perm)
               for rtype, name in resources for principal, host, perm in entries
               for op in operations or ("ANY",)]
    removed = dict.fromkeys(b for hits in ctx.metadata.delete_acls(filters) for b in hits)
    out.result([row(b) for b in removed], _text)


@acls.command("list")
@click.option("--topic", "topics", multiple=True)
@click.option("--group", "groups", multiple=True)
@click.option("--transactional-id", "txns", multiple=True)
@click.option("--cluster", is_flag=True)
@click.option("--principal", default=None, metavar="TYPE:NAME")
@click.option("--resource-pattern-type", "pattern", default="any",
              type=click.Choice(["any", "match", "literal", "prefixed"], case_sensitive=False))
@json_option()
@pass_ctx
@one_line_errors
def acls_list(ctx: Context, topics: tuple[str, ...], groups: tuple[str, ...],
              txns: tuple[str, ...], cluster: bool, principal: str | None, pattern: str,
              out: Output) -> None:
    """List ACLs (all, or those of the resources and principal given)."""
    ptype = from_name(PatternType, pattern)
    resources: list[tuple[ResourceType, str | None]] = [
        *_resources(topics, groups, txns, cluster)] or [(R.ANY, None)]
    filters = [AclFilter(rtype, name, ptype, principal) for rtype, name in resources]
    _, stored = ctx.metadata.list_acls()
    out.result([row(b) for b in stored if any(f.matches(b) for f in filters)], _text)
