"""The metrics settings each service declares in its own section (`agent`, `compactor`), so
both are named and checked alike: `metrics.listeners` (HOST:PORT of the service's metrics
port, "" = none) and, where a service refreshes gauges on a timer, the interval; the metrics
port's TLS and basic auth are declared once, in `MetricsPortSettings`, the base of both
sections."""

from __future__ import annotations

from dataclasses import dataclass

from settings import Section, integer, parse_host_port, text

METRICS_LISTENERS = "metrics.listeners"
METRICS_REFRESH_INTERVAL_MS = "metrics.refresh.interval.ms"
METRICS_SSL_CERTIFICATE_LOCATION = "metrics.ssl.certificate.location"
METRICS_SSL_KEY_LOCATION = "metrics.ssl.key.location"
METRICS_BASIC_AUTH_USER = "metrics.basic.auth.user"
METRICS_BASIC_AUTH_PASSWORD_FILE = "metrics.basic.auth.password.file"


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


def ssl_certificate_location() -> str:
    """`metrics.ssl.certificate.location`: serve the metrics port over TLS (1.2 and up) with
    this PEM certificate chain ("" = plain HTTP)."""
    return text(METRICS_SSL_CERTIFICATE_LOCATION, "", allowed="a PEM file path or empty",
                check=lambda v: True,
                doc="the metrics port's TLS certificate chain (PEM; empty: plain HTTP)")


def ssl_key_location() -> str:
    """`metrics.ssl.key.location`: its private key ("" = in the certificate file)."""
    return text(METRICS_SSL_KEY_LOCATION, "", allowed="a PEM file path or empty",
                check=lambda v: True, doc="the metrics port's TLS private key (PEM)")


def basic_auth_user() -> str:
    """`metrics.basic.auth.user`: /metrics asks for HTTP basic auth as this user ("" =
    none; /healthz and /readyz stay open for probes)."""
    return text(METRICS_BASIC_AUTH_USER, "", allowed="a user name or empty",
                check=lambda v: ":" not in v,
                doc="/metrics asks for HTTP basic auth as this user (empty: none)")


def basic_auth_password_file() -> str:
    """`metrics.basic.auth.password.file`: the file whose first line is that user's
    password (a file, so it is in no setting or process list)."""
    return text(METRICS_BASIC_AUTH_PASSWORD_FILE, "", allowed="a file path or empty",
                check=lambda v: True, doc="the file holding the metrics user's password")


@dataclass(frozen=True, slots=True)
class MetricsSecurity:
    """TLS and basic auth of a metrics port (the service's metrics.ssl.* and
    metrics.basic.auth.* settings; "" = off)."""

    certificate: str = ""
    key: str = ""
    user: str = ""
    password_file: str = ""


@dataclass(frozen=True, slots=True)
class MetricsPortSettings(Section):
    """The base of a section whose service has a metrics port (`agent`, `compactor`): the
    port's TLS and basic auth (telemetry/server.py; "" = off), declared once for both."""

    metrics_ssl_certificate_location: str = ssl_certificate_location()
    metrics_ssl_key_location: str = ssl_key_location()
    metrics_basic_auth_user: str = basic_auth_user()
    metrics_basic_auth_password_file: str = basic_auth_password_file()

    def metrics_security(self) -> MetricsSecurity:
        """The metrics port's TLS and basic auth."""
        return MetricsSecurity(self.metrics_ssl_certificate_location,
                               self.metrics_ssl_key_location, self.metrics_basic_auth_user,
                               self.metrics_basic_auth_password_file)
