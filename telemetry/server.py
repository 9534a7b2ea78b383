"""A service's metrics port: `/metrics` for Prometheus, `/healthz` and `/readyz` for probes.

One HTTP server thread per service (`ThreadingHTTPServer`: a slow readiness check never
holds a scrape up). `/healthz` answers 200 while the process serves HTTP at all (liveness);
`/readyz` answers 200 when the service's readiness check passes, else 503 with the reason
in one line (a Kubernetes readiness probe, a load balancer's health check). `/metrics`
encodes the default registry (this package's metrics, and prometheus_client's process and
GC collectors) in the text format, or OpenMetrics when the scraper asks for it.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from settings import SettingError, parse_host_port

from .config import METRICS_LISTENERS

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

    def __init__(self, address: tuple[str, int], ready: Readiness) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.ready = ready
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
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
                 name: str = "metrics") -> None:
        self.listen = listen
        self.ready = ready
        self.name = name
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
            self._server = _Server(address, self.ready)
        except OSError as exc:
            raise SettingError(f"cannot serve metrics on {self.listen}"
                               f" ({METRICS_LISTENERS}): {exc.strerror or exc}") from exc
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"silt-{self.name}", daemon=True)
        self._thread.start()
        with _serving_lock:
            _serving += 1
        host, port = self.address or address
        log.warning("%s on http://%s:%d/metrics (/healthz, /readyz)", self.name, host, port)
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
