"""S3 through s3fs (`fsspec+s3://bucket/prefix`, or `s3a://`): the fsspec store plus two
things s3fs's client allows and fsspec's API does not.

- A stream is one ranged GetObject whose body is read as the caller reads (memory bounded
  by a small read buffer, as on the boto3 backend), not a range held in memory.
- Every HTTP request s3fs sends is counted, from aiobotocore's `before-send` event on the
  session this store hands to s3fs: counts are per request, as on the boto3 backend.

botocore's retries are off (the session's default client config) and s3fs's own retry loop
is cut to one attempt, so the RetryingStore policy is the only one. The connection pool is
unbounded: aiohttp waits for a free connection where urllib3 opens another, and a
compaction holds two streams open per input file. Endpoint, region and credentials come
from the standard AWS variables and s3fs's fsspec configuration.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from fsspec.asyn import sync
from fsspec.spec import AbstractFileSystem

from . import s3
from .base import ReadStream, StreamBase
from .errors import InvalidRangeError, UnsupportedUrlError
from .fsspec_store import FsspecStore
from .local import _bad_range, _empty_stream

READ_BUFFER = 256 * 1024  # bytes a stream asks its body for at once (fewer thread hops)


class _S3fsStream(StreamBase):
    """The body of one ranged GetObject, read through s3fs's event loop."""

    def __init__(self, store: S3fsStore, body: Any, what: str, length: int) -> None:
        self._s = store
        self._body = body
        self._what = what
        self._left = length  # bytes of the range not yet returned
        self._buf = bytearray()  # read from the body, not yet returned

    def read(self, n: int = -1, /) -> bytes:
        if n < 0 or n > self._left:
            n = self._left
        if len(self._buf) < n:
            want = n - len(self._buf)
            self._buf += self._s.call(f"{self._what}: stream broke", lambda: sync(
                self._s.fs.loop, self._fill, want,
                min(self._left - len(self._buf), max(want, READ_BUFFER))))
        data = bytes(self._buf[:n])
        del self._buf[:n]
        self._left -= len(data)
        self._s._report("", 0, len(data))  # bytes received; not a request
        return data

    async def _fill(self, want: int, most: int) -> bytes:
        """At least `want` bytes of the body (fewer only at its end), at most `most`."""
        chunks: list[bytes] = []
        got = 0
        while got < want:
            piece = await self._body.read(most - got)
            if not piece:
                break
            chunks.append(piece)
            got += len(piece)
        return b"".join(chunks)

    def close(self) -> None:
        if self._body is not None:
            body, self._body = self._body, None
            with contextlib.suppress(Exception):  # the loop may be gone at shutdown
                sync(self._s.fs.loop, body.aclose)


class S3fsStore(FsspecStore):
    """`fsspec+s3://bucket/prefix` through s3fs; see the module docstring."""

    def __init__(self, url: str, protocol: str = "s3") -> None:
        self._session = AioSession()
        self._session.register("before-send.s3", self._before_send)
        super().__init__(url, protocol)
        if not self.root:
            raise UnsupportedUrlError(f"no bucket in {url!r}: use fsspec+s3://bucket/prefix")
        self.fs.retries = 1  # s3fs's own retry loop: one attempt
        # The client is made at the first request, from this default under s3fs's config
        # (and the user's config_kwargs, which win).
        endpoint = (self.fs.endpoint_url or self.fs.client_kwargs.get("endpoint_url")
                    or os.environ.get(s3.ENV_ENDPOINT))
        self._session.set_default_client_config(
            AioConfig(**s3.client_options(endpoint), max_pool_connections=0))

    def _options(self, cls: type[AbstractFileSystem]) -> dict[str, Any]:
        return {"session": self._session}

    def _before_send(self, request: Any, event_name: str = "", **_: Any) -> None:
        billed = s3.billed_request(request, event_name)
        if billed is not None:
            self._report(*billed, 0)

    def request(self, op: str, sent: int = 0) -> None:
        """Nothing: s3fs's HTTP requests are counted as they are sent."""

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        what = f"get {self.what(key)}"
        bucket, obj, _ = self.fs.split_path(self._path(key))
        if _bad_range(start, end):
            raise InvalidRangeError(f"{what}: bad range [{start}, {end})")
        if end == start:
            return _empty_stream(self._report)

        def get() -> Any:
            client = sync(self.fs.loop, self.fs.set_session)
            return sync(self.fs.loop, client.get_object, Bucket=bucket, Key=obj,
                        **s3.range_header(start, end))

        resp = self.call(what, get)
        length = int(resp.get("ContentLength", 0))
        stream = _S3fsStream(self, resp["Body"], what, length)
        if end is not None and length != end - start:
            stream.close()
            raise InvalidRangeError(f"{what}: asked for {end - start} bytes, object has {length}")
        return stream


__all__ = ["READ_BUFFER", "S3fsStore"]
