"""A fault-injecting HTTP proxy in front of an S3 server (the moto test server): a share of
the requests it is sent fail the way a real store and network fail them.

Faults, chosen at `rate` per request by a seeded generator (repeatable for a given order of
requests), or scripted for the next requests (`inject`):
- `error500`: 500 InternalError, the request not forwarded;
- `slowdown`: 503 SlowDown, not forwarded (the store throttling);
- `reset`: the connection closed before forwarding (a reset, nothing applied);
- `drop_after`: forwarded and applied by the server, then the connection closed without
  an answer (the client cannot tell whether it was applied);
- `slow`: forwarded, answered after `slow_s`.
`counts()` says what was injected, and how many faulted requests were sent again (the
client's retries: the same method, path and query seen after a fault). Requests to moto's
own `/moto-api` are never faulted. Threaded (one thread per connection, keep-alive).
"""

from __future__ import annotations

import contextlib
import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import urlsplit

ERROR500 = "error500"
SLOWDOWN = "slowdown"
RESET = "reset"
DROP_AFTER = "drop_after"
SLOW = "slow"
FAULTS = (ERROR500, SLOWDOWN, RESET, DROP_AFTER, SLOW)
# Faults the client sees as a failure (a slow answer is still an answer).
FAILING = (ERROR500, SLOWDOWN, RESET, DROP_AFTER)
# Headers that describe one hop, not the request.
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                         "te", "trailer", "upgrade", "expect"})

_ERROR_BODY = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
               "<Message>{message} (injected)</Message></Error>")


@dataclass(frozen=True, slots=True)
class ProxyCounts:
    """What the proxy saw: requests, injected faults by kind, faulted requests retried."""

    requests: int
    injected: dict[str, int]
    retried: int

    @property
    def failures_injected(self) -> int:
        """Faults the client saw as a failed request (all but `slow`)."""
        return sum(n for kind, n in self.injected.items() if kind in FAILING)


class FaultProxy:
    """Forwards HTTP requests to `upstream` (http://host:port), injecting faults (see the
    module docstring). `configure` changes the rate, seed and kinds at any time; a rate of
    0 forwards everything untouched."""

    def __init__(self, upstream: str, *, rate: float = 0.0, seed: int = 0,
                 faults: tuple[str, ...] = FAULTS, slow_s: float = 0.2,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        parsed = urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.hostname or not parsed.port:
            raise ValueError(f"upstream must be http://host:port, not {upstream!r}")
        self.upstream = (parsed.hostname, parsed.port)
        self.slow_s = slow_s
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._rate = 0.0
        self._faults: tuple[str, ...] = FAULTS
        self.configure(rate=rate, seed=seed, faults=faults)
        self._requests = 0
        self._injected: Counter[str] = Counter()
        self._faulted: Counter[tuple[str, str]] = Counter()  # awaiting a retry
        self._script: deque[str | None] = deque()
        self._retried = 0
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def configure(self, *, rate: float | None = None, seed: int | None = None,
                  faults: tuple[str, ...] | None = None) -> None:
        """Change the fault rate (0..1), reseed the generator, or choose the fault kinds."""
        with self._lock:
            if rate is not None:
                if not 0.0 <= rate <= 1.0:
                    raise ValueError(f"fault rate must be within [0, 1], not {rate}")
                self._rate = rate
            if seed is not None:
                self._rng = random.Random(seed)
            if faults is not None:
                unknown = set(faults) - set(FAULTS)
                if unknown or not faults:
                    raise ValueError(f"faults must be some of {', '.join(FAULTS)}")
                self._faults = tuple(faults)

    def inject(self, *faults: str | None) -> None:
        """Script the next requests' fate, one entry each, in order (None: forward it
        untouched), before the random faults apply again."""
        unknown = {f for f in faults if f is not None} - set(FAULTS)
        if unknown:
            raise ValueError(f"faults must be some of {', '.join(FAULTS)}, not {unknown}")
        with self._lock:
            self._script.extend(faults)

    def start(self) -> FaultProxy:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def counts(self) -> ProxyCounts:
        with self._lock:
            return ProxyCounts(self._requests, dict(self._injected), self._retried)

    def reset_counts(self) -> None:
        with self._lock:
            self._requests = 0
            self._injected.clear()
            self._faulted.clear()
            self._retried = 0
            self._script.clear()

    def _decide(self, method: str, target: str) -> str | None:
        """The fault for this request (None: forward it as it is); counts it, and counts a
        retry when an earlier request with the same method and target was failed."""
        if target.startswith("/moto-api"):
            return None
        with self._lock:
            self._requests += 1
            sig = (method, target)
            if self._faulted[sig]:
                self._faulted[sig] -= 1
                self._retried += 1
            if self._script:
                fault = self._script.popleft()
            elif self._rng.random() < self._rate:
                fault = self._rng.choice(self._faults)
            else:
                fault = None
            if fault is None:
                return None
            self._injected[fault] += 1
            if fault in FAILING:
                self._faulted[sig] += 1
            return fault

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(_ProxyHandler):
            owner: ClassVar[FaultProxy] = proxy

        return Handler


class _ProxyHandler(BaseHTTPRequestHandler):
    """One client connection: each request forwarded over a fresh upstream connection."""

    protocol_version = "HTTP/1.1"
    owner: ClassVar[FaultProxy]

    def log_message(self, format: str, *args: object) -> None:
        """No access log."""

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reset(self) -> None:
        """Close the connection with a TCP reset (SO_LINGER 0), nothing answered."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))

    def _error(self, status: int, code: str, message: str) -> None:
        body = b"" if self.command == "HEAD" else _ERROR_BODY.format(
            code=code, message=message).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.owner.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        finally:
            conn.close()

    def _handle(self) -> None:
        fault = self.owner._decide(self.command, self.path)
        if fault == RESET:
            self._reset()
            return
        body = self._body()
        if fault == ERROR500:
            self._error(500, "InternalError", "We encountered an internal error")
            return
        if fault == SLOWDOWN:
            self._error(503, "SlowDown", "Please reduce your request rate")
            return
        status, reason, headers, data = self._forward(body)
        if fault == DROP_AFTER:
            self._reset()
            return
        if fault == SLOW:
            time.sleep(self.owner.slow_s)
        self.send_response(status, reason)
        for k, v in headers:
            if k.lower() not in HOP_HEADERS and (k.lower() != "content-length"
                                                 or self.command == "HEAD"):
                self.send_header(k, v)  # HEAD: the object's length, with no body
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle
