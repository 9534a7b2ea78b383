"""What `silt compactor` exposes on its metrics port (`compactor.metrics.listeners`):
readiness (the metadata store answers) and the gauges of each round.

The gauges cost no extra snapshot: `Compactor.plan` hands each round's own planner snapshot
to `observe_round` while a metrics port is open (cleaner state per compacted topic), which
adds one `MetadataStore.stats` read (GC backlog, live data per level). They are as fresh as
the last round (`compactor.poll.interval.s`); a scrape reads only what they left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import telemetry
from metadata import MetadataStore
from planner import PlannerConfig, Snapshot, cleaner_state

if TYPE_CHECKING:
    from .worker import Compactor


def ready(metadata: MetadataStore) -> str | None:
    """None when the metadata store answers a read; its error (503) otherwise."""
    metadata.schema_version()
    return None


def observe_round(metadata: MetadataStore, snap: Snapshot, now_ms: int,
                  config: PlannerConfig) -> None:
    """The gauges of one round: the cleaner's state from the round's snapshot, the GC
    backlog and live data per level from the store's stats."""
    telemetry.planned(now_ms / 1000, {
        name: (t.max_dirty_ratio, t.oldest_dirty_age_ms / 1000)
        for name, t in cleaner_state(snap, now_ms, config).items()})
    st = metadata.stats()
    telemetry.store_state(st.files_by_state, st.bytes_by_state,
                          [(lv.level, lv.files, lv.bytes, lv.segments) for lv in st.levels])


def metrics_server(comp: Compactor) -> telemetry.MetricsServer:
    """The (unstarted) metrics port of a compactor service; its store's requests and
    failures are counted from now on."""
    comp.store.set_request_listener(telemetry.store_request)
    comp.store.set_failure_listener(telemetry.store_failure)
    return telemetry.MetricsServer(comp.config.metrics_listeners,
                                   lambda: ready(comp.metadata), "silt compactor metrics")
