"""The metrics settings each service declares in its own section (`agent`, `compactor`), so
both are named and checked alike: `metrics.listeners` (HOST:PORT of the service's metrics
port, "" = none) and, where a service refreshes gauges on a timer, the interval."""

from __future__ import annotations

from settings import integer, parse_host_port, text

METRICS_LISTENERS = "metrics.listeners"
METRICS_REFRESH_INTERVAL_MS = "metrics.refresh.interval.ms"


def listeners() -> str:
    """`metrics.listeners`: where the service serves /metrics, /healthz and /readyz
    (HOST:PORT; port 0: any free port, logged). Empty (the default): no port is opened, as
    a Kafka broker exposes no metrics endpoint until one is configured."""
    return text(METRICS_LISTENERS, "", allowed="HOST:PORT or empty (no metrics port)",
                check=lambda v: v == "" or parse_host_port(v) is not None)


def refresh_interval_ms() -> int:
    """`metrics.refresh.interval.ms`: how often gauges that need a metadata read are
    computed (15 s, Prometheus' default scrape interval); never per scrape."""
    return integer(METRICS_REFRESH_INTERVAL_MS, 15_000, lo=100)
