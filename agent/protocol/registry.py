"""This agent in the agent registry (metadata/agents.py): registered at start, a heartbeat
thread, deregistered at shutdown, and the live set Metadata lists as brokers.

The agent id is the first listener's advertised `host:port`, so a restarted agent keeps its
node id (and the partitions it leads); the registry holds its advertised endpoint on every
listener. Heartbeats run on their own thread, not the event loop (a slow
metadata store must not stall requests). A failed heartbeat is logged and retried at the
next interval; a heartbeat finding the agent deregistered (another process with the same
advertised address stopped) registers it again. A crash leaves the row: other agents stop
listing it once broker.session.timeout.ms passes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from metadata import AgentInfo, MetadataStore
from metadata.errors import UnknownAgentError

log = logging.getLogger(__name__)


class Registration:
    """One agent's registry entry and heartbeat thread (`start`, then `stop`): its
    advertised endpoint per listener, the first listener's naming it."""

    def __init__(self, metadata: MetadataStore,
                 endpoints: Mapping[str, tuple[str, int]]) -> None:
        self.metadata = metadata
        self.endpoints = dict(endpoints)
        host, port = next(iter(self.endpoints.values()))
        self.host, self.port = host, port
        self.agent_id = f"{host}:{port}"
        self.info: AgentInfo | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> AgentInfo:
        """Register (blocking) and start heartbeating every broker.heartbeat.interval.ms."""
        self.info = self.metadata.register_agent(self.agent_id, self.host, self.port,
                                                 self.endpoints)
        self._thread = threading.Thread(target=self._beat, name="silt-heartbeat", daemon=True)
        self._thread.start()
        return self.info

    def stop(self) -> None:
        """Stop heartbeating and deregister (clients stop being sent here). Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.info is not None:
            self.metadata.deregister_agent(self.agent_id)
            self.info = None

    def _beat(self) -> None:
        interval_s = self.metadata.config.broker_heartbeat_interval_ms / 1000
        while not self._stop.wait(interval_s):
            try:
                try:
                    self.info = self.metadata.heartbeat_agent(self.agent_id)
                except UnknownAgentError:
                    log.warning("agent %s was deregistered: registering again", self.agent_id)
                    self.info = self.metadata.register_agent(
                        self.agent_id, self.host, self.port, self.endpoints)
            except Exception:
                log.exception("agent %s: heartbeat failed (retrying)", self.agent_id)

    def live_brokers(self) -> list[AgentInfo]:
        """The live agents by node id, this one always among them (blocking: a metadata
        read). This agent is listed even if its own heartbeat is late: it is serving."""
        live = self.metadata.live_brokers()
        me = self.info
        if me is not None and all(a.node_id != me.node_id for a in live):
            live = sorted([*live, me], key=lambda a: a.node_id)
        return live
