"""What `silt agent` exposes on its metrics port (`agent.metrics.listeners`): readiness
(listening and registered in the agent registry, not shutting down) and the lag of the
consumer groups it coordinates, computed every `agent.metrics.refresh.interval.ms` on a
timer thread (one `MetadataStore.group_lag` read per group; never per scrape). Each group
is coordinated by one agent at a time, so summing the agents' series counts each group once.
"""

from __future__ import annotations

from typing import Self

import telemetry
from clock import Periodic

from .context import ServerContext


def ready(ctx: ServerContext) -> str | None:
    """None once the agent listens and is registered (clients are sent to it), until it
    deregisters at shutdown; else why not."""
    if ctx.stopping:
        return "shutting down"
    if ctx.registration is None or ctx.registration.info is None:
        return "not registered in the agent registry"
    return None


def refresh_group_lag(ctx: ServerContext) -> None:
    """The lag per (group, topic) of the groups loaded here, summed over partitions."""
    lag: dict[tuple[str, str], int] = {}
    for group_id in list(ctx.groups.groups):  # a copy: the loop thread owns the dict
        for row in ctx.metadata.group_lag(group_id):
            if row.lag is not None:
                key = (group_id, row.topic)
                lag[key] = lag.get(key, 0) + row.lag
    telemetry.group_lag(lag)


class AgentMetrics:
    """The metrics port and the group-lag timer of one `silt agent` (`start`, `stop`)."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.server = telemetry.MetricsServer(ctx.config.metrics_listeners,
                                              lambda: ready(ctx), "silt agent metrics",
                                              ctx.config.metrics_security())
        self.timer = Periodic("silt-metrics", ctx.config.metrics_refresh_interval_ms,
                              lambda: refresh_group_lag(ctx), ctx.metadata.clock)

    def start(self) -> Self:
        """Count the store's requests, open the port (if configured) and start the timer."""
        self.ctx.store.set_request_listener(telemetry.store_request)
        self.ctx.store.set_failure_listener(telemetry.store_failure)
        if self.server.start().address is not None:
            self.timer.start()
        return self

    def stop(self) -> None:
        """Stop the timer and close the port. Idempotent."""
        self.timer.stop()
        self.server.stop()
