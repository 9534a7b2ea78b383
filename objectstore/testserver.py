"""A real S3 HTTP server (moto) on 127.0.0.1 that records every request it serves.

Used by the test-suite and by tools that must cross-check client-side request counts
against what the server actually saw. moto is imported lazily: it is a dev/extra
dependency, not a runtime one.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_UPLOAD = re.compile(rb"<Upload>.*?</Upload>", re.S)
_UPLOAD_ID = re.compile(rb"<UploadId>([^<]*)</UploadId>")
_INITIATED = re.compile(rb"<Initiated>[^<]*</Initiated>")
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True, slots=True)
class ServedRequest:
    """One request as the server received it."""

    method: str
    path: str
    query: str
    range: str | None

    @property
    def operation(self) -> str:
        """S3 operation (as billed) from method, path-style path and query string.

        `/` is the service, `/bucket` (or `/bucket/`) the bucket, `/bucket/key...` an object.
        Object requests map to the names CountingStore uses (PUT, GET, UploadPart, ...);
        bucket-level requests other than listing get their own names so they never pass
        for object requests.
        """
        params = {p.split("=", 1)[0] for p in self.query.split("&") if p}
        parts = self.path.lstrip("/").split("/", 1)
        if not parts[0]:
            return "ListBuckets" if self.method == "GET" else self.method
        if len(parts) == 1 or not parts[1]:
            if self.method == "GET" and "uploads" in params:
                return "ListMultipartUploads"
            return _BUCKET_OPS.get(
                (self.method, "delete" in params), f"{self.method}Bucket"
            )
        if self.method == "PUT":
            return "UploadPart" if "partNumber" in params else "PUT"
        if self.method == "POST":
            if "uploads" in params:
                return "CreateMultipartUpload"
            if "uploadId" in params:
                return "CompleteMultipartUpload"
            return "POST"
        if self.method == "DELETE":
            return "AbortMultipartUpload" if "uploadId" in params else "DELETE"
        if self.method == "GET":
            return "ListParts" if "uploadId" in params else "GET"
        return self.method  # HEAD


# (method, has `?delete`) on a bucket path -> operation.
_BUCKET_OPS = {
    ("GET", False): "LIST",  # ListObjects(V2) (ListMultipartUploads, `?uploads`, is apart)
    ("POST", True): "DELETE",  # DeleteObjects (batch)
    ("PUT", False): "CreateBucket",
    ("HEAD", False): "HeadBucket",
    ("DELETE", False): "DeleteBucket",
}


class RecordingMotoServer:
    """moto's S3 server behind a middleware that logs each request before serving it."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._requests: list[ServedRequest] = []
        self._initiated: dict[bytes, bytes] = {}  # upload id -> when created (ISO 8601)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def _wrap(self, app: WSGIApp) -> WSGIApp:
        def recording_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            path = str(environ.get("PATH_INFO", ""))
            if path.startswith("/moto-api"):
                return app(environ, start_response)
            req = ServedRequest(
                method=str(environ.get("REQUEST_METHOD", "")),
                path=path,
                query=str(environ.get("QUERY_STRING", "")),
                range=environ.get("HTTP_RANGE"),
            )
            with self._lock:
                self._requests.append(req)
            if req.operation in ("CreateMultipartUpload", "ListMultipartUploads"):
                return self._initiated_times(req.operation, app(environ, start_response))
            return app(environ, start_response)

        return recording_app

    def _initiated_times(self, operation: str, body: Iterable[bytes]) -> list[bytes]:
        """moto lists every multipart upload as initiated in 2010: note when each was
        created, and list it with that time (same length: Content-Length holds)."""
        data = b"".join(body)
        if operation == "CreateMultipartUpload":
            found = _UPLOAD_ID.search(data)
            if found:
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
                with self._lock:
                    self._initiated[found.group(1)] = now.encode()
            return [data]

        def fix(upload: re.Match[bytes]) -> bytes:
            block = upload.group(0)
            upload_id = _UPLOAD_ID.search(block)
            with self._lock:
                when = self._initiated.get(upload_id.group(1)) if upload_id else None
            if when is None:
                return block
            return _INITIATED.sub(b"<Initiated>" + when + b"</Initiated>", block)

        return [_UPLOAD.sub(fix, data)]

    def start(self) -> RecordingMotoServer:
        """Start serving in a daemon thread; returns self."""
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        class QuietHandler(MotoRequestHandler):
            """No access log on stderr: the request record is kept in memory instead."""

            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass

        app = self._wrap(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(
            self._host, self._port, app, threaded=True, request_handler=QuietHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def reset(self) -> None:
        """Forget all buckets/objects (moto reset API) and the request log."""
        import urllib.request

        urllib.request.urlopen(
            urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        ).read()
        self.clear_log()

    def clear_log(self) -> None:
        with self._lock:
            self._requests.clear()

    @property
    def requests(self) -> list[ServedRequest]:
        with self._lock:
            return list(self._requests)

    def counts(self) -> Counter[str]:
        """Requests served so far, by S3 operation."""
        return Counter(r.operation for r in self.requests)
