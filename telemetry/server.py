"""A service's metrics port: `/metrics` for Prometheus, `/healthz` and `/readyz` for probes.

One HTTP server thread per service (`ThreadingHTTPServer`: a slow readiness check never
holds a scrape up). `/healthz` answers 200 while the process serves HTTP at all (liveness);
`/readyz` answers 200 when the service's readiness check passes, else 503 with the reason
in one line (a Kubernetes readiness probe, a load balancer's health check). `/metrics`
encodes the default registry (this package's metrics, and prometheus_client's process and
GC collectors) in the text format, or OpenMetrics when the scraper asks for it.
"""

from __future__ import annotations

import base64
import hmac
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from settings import SettingError, parse_host_port

from .config import METRICS_LISTENERS, MetricsSecurity

log = logging.getLogger(__name__)

# Why a service is not ready, or None when it is.
Readiness = Callable[[], str | None]

_serving = 0
_serving_lock = threading.Lock()


def serving() -> bool:
    """Whether a metrics port is open in this process (state gauges are worth computing)."""
    return _serving > 0


def _always_ready() -> str | None:
    return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], ready: Readiness,
                 security: MetricsSecurity) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.ready = ready
        self.credentials: bytes | None = None  # the expected "user:password"
        if security.user:
            with open(security.password_file, encoding="utf-8") as f:
                password = (f.read().splitlines() or [""])[0]
            self.credentials = f"{security.user}:{password}".encode()
        super().__init__(address, _Handler)
        if security.certificate:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(security.certificate, security.key or None)
            # The handshake happens at the first read, in the request's own thread: a slow
            # client never holds up the accept loop.
            self.socket = context.wrap_socket(self.socket, server_side=True,
                                              do_handshake_on_connect=False)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics" and not self._authorized():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="silt metrics"')
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/metrics":
            encode, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._reply(200, encode(REGISTRY), content_type)
        elif path == "/healthz":
            self._reply(200, b"ok\n")
        elif path == "/readyz":
            try:
                why = self.server.ready()
            except Exception as exc:  # the check itself failed: not ready, and why
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if why is None:
                self._reply(200, b"ready\n")
            else:
                self._reply(503, f"not ready: {why}\n".encode())
        else:
            self._reply(404, b"not found: /metrics, /healthz, /readyz\n")

    def _authorized(self) -> bool:
        """Whether the request carries the basic-auth credentials (or none are needed)."""
        expected = self.server.credentials
        if expected is None:
            return True
        scheme, _, value = self.headers.get("Authorization", "").partition(" ")
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except ValueError:
            return False
        return scheme.lower() == "basic" and hmac.compare_digest(given, expected)

    def _reply(self, status: int, body: bytes,
               content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes every few seconds are not worth a log line."""


class MetricsServer:
    """The metrics port of one service, at `listen` (HOST:PORT; "" = none: start and stop
    do nothing). `ready` says why the service is not ready, or None when it is."""

    def __init__(self, listen: str, ready: Readiness = _always_ready,
                 name: str = "metrics", security: MetricsSecurity | None = None) -> None:
        self.listen = listen
        self.ready = ready
        self.name = name
        self.security = security or MetricsSecurity()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) it serves on once started (port 0 resolved), else None."""
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> Self:
        """Bind and serve on a daemon thread. A port that cannot be bound is a SettingError
        naming `metrics.listeners` (one line, exit 1 at start-up)."""
        global _serving
        if not self.listen or self._server is not None:
            return self
        address = parse_host_port(self.listen)
        if address is None:
            raise SettingError(f"invalid setting {METRICS_LISTENERS}={self.listen}:"
                               " must be HOST:PORT")
        try:
            self._server = _Server(address, self.ready, self.security)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise SettingError(f"cannot serve metrics on {self.listen}"
                               f" ({METRICS_LISTENERS}):"
                               f" {getattr(exc, 'strerror', None) or exc}") from exc
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"silt-{self.name}", daemon=True)
        self._thread.start()
        with _serving_lock:
            _serving += 1
        host, port = self.address or address
        scheme = "https" if self.security.certificate else "http"
        log.warning("%s on %s://%s:%d/metrics (/healthz, /readyz)", self.name, scheme, host,
                    port)
        return self

    def stop(self) -> None:
        """Stop serving and close the port. Idempotent."""
        global _serving
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with _serving_lock:
            _serving -= 1

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
