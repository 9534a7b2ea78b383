"""Telemetry: every Prometheus metric of siltstream (`metrics.py`, defined once, with the one
call per event that updates it) and a service's metrics port (`server.py`: /metrics,
/healthz, /readyz).

Cross-cutting, so it sits on the lowest floor: it imports only `settings` and
prometheus_client, and any package may call it. Product code calls the functions exported
here (or hands `store_request` / `store_failure` to the object store's listeners) and never
imports prometheus_client itself.
"""

from .config import (
    METRICS_LISTENERS,
    METRICS_REFRESH_INTERVAL_MS,
    MetricsPortSettings,
    MetricsSecurity,
)
from .metrics import (
    commit_done,
    compaction_job,
    connection_closed,
    connection_opened,
    connection_refused,
    fetch_round_trips,
    fetched,
    flush_failed,
    flushed,
    group_lag,
    metadata_round_trip,
    planned,
    request,
    round_trips_here,
    sasl_authentication,
    store_failure,
    store_request,
    store_state,
)
from .server import MetricsServer, Readiness, serving

__all__ = [
    "METRICS_LISTENERS",
    "METRICS_REFRESH_INTERVAL_MS",
    "MetricsPortSettings",
    "MetricsSecurity",
    "MetricsServer",
    "Readiness",
    "commit_done",
    "compaction_job",
    "connection_closed",
    "connection_opened",
    "connection_refused",
    "fetch_round_trips",
    "fetched",
    "flush_failed",
    "flushed",
    "group_lag",
    "metadata_round_trip",
    "planned",
    "request",
    "round_trips_here",
    "sasl_authentication",
    "serving",
    "store_failure",
    "store_request",
    "store_state",
]
