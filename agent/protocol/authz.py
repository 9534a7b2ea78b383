"""The agent's authorizer: the decisions handlers ask for, made from an in-memory snapshot
of the metadata store's ACLs for the principal and host of the connection being served
(`session.SESSION`).

No authorizer configured (`authorizer.class.name` empty, the default): every request is
allowed, authorized-operations bitfields hold every operation of the resource type (as
Kafka's AuthHelper without an authorizer), and the ACL APIs answer SECURITY_DISABLED.

With one: `acl.Authorizer` snapshots, swapped whole (a decision never reads the database
and never sees half a change). The snapshot is loaded before the agent listens; after that
a thread re-reads `acl_version` whenever the commit watcher hears an ACL change (on SQLite:
any commit) and the bindings only when it moved, so another agent's CreateAcls is applied
here within the watcher's latency plus one read. The metadata store down: the last
snapshot keeps deciding and the thread retries every RETRY_S.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from acl import (
    CLUSTER_NAME,
    SUPPORTED,
    Acl,
    AclFilter,
    Authorizer,
    Operation,
    ResourceType,
    bitfield,
    parse_super_users,
)
from agent.config import AgentConfig
from metadata import MetadataStore

from .session import SESSION

log = logging.getLogger(__name__)

RETRY_S = 1.0
NOT_COMPUTED = -(2**31)  # an authorized-operations field not asked for (Kafka's default)
def _yes(name: str) -> bool:
    return True


# Every operation of each type: the bitfield without an authorizer.
_EVERY = {rtype: bitfield(ops) for rtype, ops in SUPPORTED.items()}


class Authorization:
    """Decisions for the current connection (`SESSION`), and the snapshot's upkeep."""

    def __init__(self, config: AgentConfig) -> None:
        self.enabled = bool(config.authorizer_class_name)
        self._snapshot = Authorizer((), parse_super_users(config.super_users),
                                    config.allow_everyone_if_no_acl_found)
        self._version = -1
        self._lock = threading.Lock()
        self._wanted = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._metadata: MetadataStore | None = None

    # ------------------------------------------------------------------ decisions

    def allows(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        """Whether the connection's principal may do `op` on the resource."""
        if not self.enabled:
            return True
        session = SESSION.get()
        return self._snapshot.authorize(session.principal, session.host, op, rtype, name)

    def allowed(self, op: Operation, rtype: ResourceType, names: Iterable[str]) -> set[str]:
        """Those of `names` the principal may do `op` on (AuthHelper.filterByAuthorized)."""
        if not self.enabled:
            return set(names)
        session = SESSION.get()
        decide = self._snapshot.authorize
        return {name for name in set(names)
                if decide(session.principal, session.host, op, rtype, name)}

    def decider(self, op: Operation, rtype: ResourceType) -> Callable[[str], bool]:
        """`allows(op, rtype, name)` as a function of the name for the current connection,
        usable from the thread pool (which does not see the connection's SESSION)."""
        if not self.enabled:
            return _yes
        session, snapshot = SESSION.get(), self._snapshot
        principal, host = session.principal, session.host
        return lambda name: snapshot.authorize(principal, host, op, rtype, name)

    def allows_any(self, op: Operation, rtype: ResourceType) -> bool:
        """Whether the principal may do `op` on some resource of `rtype`
        (AuthHelper.authorizeByResourceType)."""
        if not self.enabled:
            return True
        session = SESSION.get()
        return self._snapshot.authorize_any(session.principal, session.host, op, rtype)

    def operations(self, rtype: ResourceType, name: str) -> int:
        """The authorized-operations bitfield of the resource (AuthHelper.authorizedOperations)."""
        if not self.enabled:
            return _EVERY[rtype]
        session = SESSION.get()
        return self._snapshot.authorized_operations(session.principal, session.host, rtype,
                                                    name)

    def cluster_operations(self, asked: bool) -> int:
        """The cluster's authorized-operations field of Metadata (v8-v10) and
        DescribeCluster: NOT_COMPUTED unless asked, 0 without DESCRIBE on the cluster."""
        if not asked:
            return NOT_COMPUTED
        if not self.allows(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return 0
        return self.operations(ResourceType.CLUSTER, CLUSTER_NAME)

    def acls(self, flt: AclFilter) -> list[Acl]:
        """The cached bindings `flt` matches (DescribeAcls)."""
        return self._snapshot.acls(flt)

    # ------------------------------------------------------------------ upkeep

    def load(self, metadata: MetadataStore) -> None:
        """Read the bindings now (blocking; after this agent changed them, so that its next
        request sees the change); a no-op without an authorizer."""
        if self.enabled:
            version, acls = metadata.list_acls()
            self._swap(version, acls)

    def _swap(self, version: int, acls: list[Acl]) -> None:
        """Decide from `acls` from now on, unless a newer version is already in place
        (a handler's own reload and the refresh thread may race)."""
        with self._lock:
            if version <= self._version:
                return
            self._snapshot = self._snapshot.with_acls(acls)
            self._version = version
        log.info("authorizer: %d ACLs (version %d)", len(acls), version)

    def start(self, metadata: MetadataStore) -> None:
        """Load the bindings, then keep them current on `changed` (a no-op without an
        authorizer)."""
        if not self.enabled:
            return
        self._metadata = metadata
        self.load(metadata)
        self._thread = threading.Thread(target=self._run, name="silt-acls", daemon=True)
        self._thread.start()

    def changed(self) -> None:
        """The ACLs may have changed (the commit watcher's thread): re-read them soon."""
        self._wanted.set()

    def stop(self) -> None:
        """Stop the refresh thread. Idempotent."""
        self._stopping = True
        self._wanted.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        metadata = self._metadata
        assert metadata is not None
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._stopping:
                return
            try:
                if metadata.acl_version() != self._version:
                    self._swap(*metadata.list_acls())
            except Exception as exc:  # the last snapshot keeps deciding
                log.warning("authorizer: reading the ACLs failed (%s); retrying", exc)
                self._wanted.set()
                time.sleep(RETRY_S)
