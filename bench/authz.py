"""Authorization cost per decision (issue 25's goal: under 5 µs with 1,000 ACLs).

A StandardAuthorizer snapshot (`acl.Authorizer`) of 1,000 bindings shaped like a real
cluster's: per-application LITERAL topic and group ACLs for 200 principals, PREFIXED topic
ACLs, `*` wildcards, host-bound ACLs and DENYs. Each case is one decision the handlers make
(through `agent.protocol.authz.Authorization`, which reads the connection's session), timed
as the median of rounds of many calls, CPU µs per call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from acl import CLUSTER_NAME, Acl, Operation, PatternType, Permission, ResourceType
from agent.config import STANDARD_AUTHORIZER, AgentConfig
from agent.protocol.authz import Authorization
from agent.protocol.session import SESSION, Session

R, Op, P = ResourceType, Operation, PatternType
ALLOW, DENY = Permission.ALLOW, Permission.DENY
HOST = "10.0.0.7"


def bindings(n: int = 1_000) -> list[Acl]:
    """`n` bindings (n >= 500): apps' literal topic and group ACLs, prefixed topics,
    wildcards, host-bound ACLs and DENYs."""
    acls: list[Acl] = []
    app = 0
    while len(acls) < n - 100:
        who = f"User:app{app}"
        acls += [Acl(R.TOPIC, f"orders-{app}", P.LITERAL, who, "*", Op.WRITE, ALLOW),
                 Acl(R.TOPIC, f"events-{app}", P.LITERAL, who, "*", Op.READ, ALLOW),
                 Acl(R.GROUP, f"group-{app}", P.LITERAL, who, "*", Op.READ, ALLOW),
                 Acl(R.TOPIC, f"team{app % 40}-", P.PREFIXED, who, "*", Op.READ, ALLOW)]
        app += 1
    for i in range(n - len(acls) - 4):
        acls.append(Acl(R.TOPIC, f"secret-{i}", P.LITERAL, "User:*", f"10.9.0.{i % 250}",
                        Op.ALL, DENY))
    acls += [Acl(R.TOPIC, "*", P.LITERAL, "User:auditor", "*", Op.DESCRIBE, ALLOW),
             Acl(R.GROUP, "*", P.LITERAL, "User:auditor", "*", Op.DESCRIBE, ALLOW),
             Acl(R.TOPIC, "team7-", P.PREFIXED, "User:app7", HOST, Op.WRITE, DENY),
             Acl(R.CLUSTER, CLUSTER_NAME, P.LITERAL, "User:admin", "*", Op.ALL, ALLOW)]
    return acls[:n]


def _cpu_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Median CPU µs per call over `rounds` rounds of `calls` calls."""
    samples = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        samples.append((time.process_time() - start) / calls * 1e6)
    return statistics.median(samples)


def _cases(authz: Authorization) -> list[tuple[str, str, Callable[[], object], bool]]:
    """(case, principal, the decision, its expected outcome)."""
    return [
        ("literal allow (WRITE own topic)", "User:app3",
         lambda: authz.allows(Op.WRITE, R.TOPIC, "orders-3"), True),
        ("implied DESCRIBE (READ grant)", "User:app3",
         lambda: authz.allows(Op.DESCRIBE, R.TOPIC, "events-3"), True),
        ("prefixed allow", "User:app5",
         lambda: authz.allows(Op.READ, R.TOPIC, "team5-payments"), True),
        ("prefixed DENY from host", "User:app7",
         lambda: authz.allows(Op.WRITE, R.TOPIC, "team7-x"), False),
        ("wildcard allow", "User:auditor",
         lambda: authz.allows(Op.DESCRIBE, R.TOPIC, "orders-9"), True),
        ("no ACL: default deny", "User:app3",
         lambda: authz.allows(Op.READ, R.TOPIC, "unnamed-topic"), False),
        ("super user", "User:root",
         lambda: authz.allows(Op.DELETE, R.TOPIC, "orders-3"), True),
        ("group READ", "User:app3",
         lambda: authz.allows(Op.READ, R.GROUP, "group-3"), True),
        ("topic authorized operations (8 decisions)", "User:app3",
         lambda: authz.operations(R.TOPIC, "orders-3"), True),
        ("idempotent producer: WRITE on any topic", "User:app3",
         lambda: authz.allows_any(Op.WRITE, R.TOPIC), True),
    ]


def run_authz(quick: bool = False) -> list[dict[str, Any]]:
    """µs per decision for each case, with 1,000 ACLs (and 10,000 for the literal case)."""
    calls, rounds = (2_000, 3) if quick else (20_000, 7)
    rows: list[dict[str, Any]] = []
    for n in (1_000, 10_000):
        authz = Authorization(AgentConfig(authorizer_class_name=STANDARD_AUTHORIZER,
                                          super_users="User:root"))
        authz._swap(1, bindings(n))  # a snapshot without a metadata store
        cases = _cases(authz)
        for name, principal, fn, expected in cases:
            if n != 1_000 and not name.startswith("literal"):
                continue
            token = SESSION.set(Session(principal=principal, host=HOST))
            try:
                outcome = fn()
                assert bool(outcome) is expected, (name, outcome)
                rows.append({"benchmark": "authz", "acls": n, "case": name,
                             "us_per_decision": round(_cpu_us(fn, calls, rounds), 2)})
            finally:
                SESSION.reset(token)
    return rows
