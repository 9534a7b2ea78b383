"""The one object-store API, its stream protocols and request counters.

Contract for every backend (what raises what):
- a missing key -> FileNotFoundError; a missing bucket -> FileNotFoundError naming it;
- access denied -> PermissionError; a failed precondition -> FileExistsError;
- throttling, 5xx, timeouts, resets -> RetriableStoreError (the RetryingStore retries those);
- a range outside the object -> InvalidRangeError (a ValueError), also for `start >= size`
  with an open end unless start is 0 (S3 answers 416 there); an empty range [s, s) makes no
  request and is an empty stream, without checking the key;
- writing to a closed or aborted ObjectWriter -> ValueError;
- any other failure -> ObjectStoreError (see objectstore.errors).
Keys are relative to the store's root or prefix. Every backend reports each request it
makes to its listener (see `set_request_listener`), so counts are per HTTP request for S3;
a backend that can tell a request failed (S3: per HTTP request) reports that too (see
`set_failure_listener`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from types import TracebackType
from typing import Protocol, Self, TypeVar

# Request types, as S3 bills and logs them.
PUT = "PUT"
CREATE_MULTIPART = "CreateMultipartUpload"
UPLOAD_PART = "UploadPart"
COMPLETE_MULTIPART = "CompleteMultipartUpload"
ABORT_MULTIPART = "AbortMultipartUpload"
GET = "GET"
HEAD = "HEAD"
LIST = "LIST"
LIST_MULTIPART = "ListMultipartUploads"
DELETE = "DELETE"
REQUEST_TYPES = (PUT, CREATE_MULTIPART, UPLOAD_PART, COMPLETE_MULTIPART, ABORT_MULTIPART,
                 GET, HEAD, LIST, LIST_MULTIPART, DELETE)
# Times the store keeps (S3's LastModified and Initiated: whole seconds, and the store's
# clock is not ours): something counts as older than a threshold only this much later.
MTIME_SLACK_MS = 1_000

# Listener signature: (request type, bytes sent, bytes received).
RequestListener = Callable[[str, int, int], None]


# Failure listener signature: (request type, the exception class name the contract above
# maps the failure to: FileNotFoundError, RetriableStoreError, ...).
FailureListener = Callable[[str, str], None]


T = TypeVar("T")


class RequestRunner(Protocol):
    """Runs one request (a call that makes exactly one request, or fails): the retry
    policy, handed to a backend whose streamed uploads make requests after `put_stream`
    has returned (see `ObjectStore.set_request_runner`)."""

    def __call__(self, request: Callable[[], T], /) -> T: ...


def run_directly(request: Callable[[], T], /) -> T:
    """The default runner: one attempt."""
    return request()


def _no_listener(op: str, sent: int, received: int) -> None:
    """Default listener: counting is a wrapper's job."""


def _no_failure_listener(op: str, error: str) -> None:
    """Default failure listener: nobody is told."""


class ReadStream(Protocol):
    """A forward-only byte stream over one object range (one GET request)."""

    def read(self, n: int = -1, /) -> bytes:
        """Exactly n bytes unless the range ends first; n < 0 reads to the end."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> ReadStream: ...

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class _Closing(abc.ABC):
    """Used as a context manager: `with` gives the object itself, and exit closes it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the underlying file or HTTP body (a writer: commit the upload)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class StreamBase(_Closing):
    """What every ReadStream implementation shares: used as a context manager, exit closes."""

    @abc.abstractmethod
    def read(self, n: int = -1, /) -> bytes:
        """Exactly n bytes unless the range ends first; n < 0 reads to the end."""


class ObjectWriter(_Closing):
    """A streaming upload: `write` as often as needed, `close` to commit, `abort` to drop.

    Nothing is visible under the key before `close` returns; an aborted or crashed upload
    leaves no object (S3 multipart parts are aborted; local files are written aside). A
    failed `write` or `close` aborts the upload before raising. `close` and `abort` are
    idempotent; used as a context manager, an exception aborts and normal exit commits.
    """

    @abc.abstractmethod
    def write(self, data: bytes) -> int:
        """Append `data` (may upload a part); returns len(data)."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Drop everything written; no object is created."""

    @property
    @abc.abstractmethod
    def bytes_written(self) -> int:
        """Bytes accepted by `write` so far."""

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if t is None:
            self.close()
        else:
            self.abort()


class WriterBase(ObjectWriter):
    """What every backend's ObjectWriter shares: the byte count, the refusal to write once
    closed or aborted, and idempotent `close` and `abort` (a failed commit aborts before
    raising). A backend supplies `_write` (accept bytes), `_commit` (make the object
    visible) and `_discard` (drop what was written)."""

    def __init__(self, name: str) -> None:
        self._name = name  # names the upload in errors: its key or path
        self._n = 0
        self._done = False

    @property
    def bytes_written(self) -> int:
        return self._n

    def write(self, data: bytes) -> int:
        if self._done:
            raise ValueError(f"write to a closed or aborted upload of {self._name}")
        self._n += len(data)
        self._write(data)
        return len(data)

    def close(self) -> None:
        if self._done:
            return
        try:
            self._commit()
        except BaseException:
            self.abort()
            raise
        self._done = True

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._discard()

    @abc.abstractmethod
    def _write(self, data: bytes) -> None:
        """Accept `data` (counted already); a backend that loses a part aborts itself."""

    @abc.abstractmethod
    def _commit(self) -> None:
        """Make the object visible under its key."""

    @abc.abstractmethod
    def _discard(self) -> None:
        """Drop what was written (best effort: GC reaps what is left)."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """A listed object. `modified_ms`: when it was last written (epoch ms, as the store's
    own clock says: S3's LastModified, whole seconds; a file's mtime), None where the
    backend keeps no such time (memory://)."""

    key: str
    size: int
    modified_ms: int | None = None


@dataclass(frozen=True, slots=True)
class UnfinishedUpload:
    """An upload begun and neither completed nor aborted (S3: a multipart upload; a local
    store: a temporary file), left by a process killed mid-upload or by a retried
    CreateMultipartUpload whose first answer was lost. `key`: the object it would create;
    `upload_id`: which upload of that key; `started_ms`: when it began, as the store's own
    clock says (epoch ms)."""

    key: str
    upload_id: str
    started_ms: int


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """Requests made by type, and bytes moved, since the store was opened."""

    PUT: int = 0
    CreateMultipartUpload: int = 0
    UploadPart: int = 0
    CompleteMultipartUpload: int = 0
    AbortMultipartUpload: int = 0
    GET: int = 0
    HEAD: int = 0
    LIST: int = 0
    ListMultipartUploads: int = 0
    DELETE: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> RequestCounts:
        """The counts for these field names; names missing from `counts` are 0."""
        return cls(**{f.name: counts.get(f.name, 0) for f in fields(cls)})

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __sub__(self, other: RequestCounts) -> RequestCounts:
        return RequestCounts(**{k: v - getattr(other, k) for k, v in self.as_dict().items()})

    @property
    def writes(self) -> int:
        """Requests billed as PUT/COPY/POST/LIST class."""
        return (self.PUT + self.CreateMultipartUpload + self.UploadPart
                + self.CompleteMultipartUpload + self.LIST + self.ListMultipartUploads)


class ObjectStore(abc.ABC):
    """One object store; see the module docstring for the error contract."""

    url: str

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store `data` under `key` with one request, replacing any object there."""

    @abc.abstractmethod
    def put_stream(self, key: str) -> ObjectWriter:
        """A streaming upload: one PUT at close while the object stays under the S3 backend's
        multipart threshold, else multipart; memory is bounded by that threshold."""

    @abc.abstractmethod
    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        """A forward-only stream over bytes [start, end) (`end=None`: to the end of the
        object) read incrementally from exactly one GET request."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) with one ranged GET."""

    def get_range_writable(self, key: str, start: int, end: int) -> bytearray:
        """`get_range` in a buffer the caller owns and may change (the segment cache
        patches base offsets in place). A backend that can read straight into it overrides
        this (the file store: one preadv(2), no copy of the bytes)."""
        return bytearray(self.get_range(key, start, end))

    def get(self, key: str) -> bytes:
        """The whole object (one GET)."""
        with self.open_stream(key) as s:
            return s.read()

    @abc.abstractmethod
    def size(self, key: str) -> int:
        """The object's size (one HEAD)."""

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete objects; missing keys are not an error (batched: 1,000 per request)."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Objects whose key starts with `prefix`, in key order, with their sizes and
        modification times (one LIST request per 1,000 objects on S3)."""

    def unfinished_uploads(self, started_before_ms: int) -> Sequence[UnfinishedUpload]:
        """Uploads under the store's prefix begun before `started_before_ms` (the store's
        clock) and still unfinished: invisible, yet billed on S3 (one ListMultipartUploads
        per 1,000 uploads there). A backend without such leftovers has none."""
        return []

    def abort_upload(self, upload: UnfinishedUpload) -> None:
        """Drop an unfinished upload (one AbortMultipartUpload on S3); one already gone
        (completed or aborted since it was listed) raises FileNotFoundError."""
        raise FileNotFoundError(f"no unfinished upload {upload.upload_id!r} of {upload.key!r}")

    @abc.abstractmethod
    def set_request_listener(self, listener: RequestListener) -> None:
        """Have every request this store makes reported to `listener`."""

    @abc.abstractmethod
    def set_failure_listener(self, listener: FailureListener) -> None:
        """Have every request of this store that fails reported to `listener`, after its
        request was (a subset of the requests). A backend that cannot tell reports none."""

    @abc.abstractmethod
    def set_request_runner(self, runner: RequestRunner) -> None:
        """Have each request a streamed upload makes (S3: a PUT, each multipart part, the
        completion and the abort) run by `runner`, the retry policy of a RetryingStore
        around this store. A backend whose writers make no requests of their own keeps it
        unused."""

    def counters(self) -> RequestCounts:
        """Requests made so far; zero unless the store is wrapped in a CountingStore."""
        return RequestCounts()


class Backend(ObjectStore):
    """A store that makes its requests itself (not a wrapper): it reports each one to the
    listener given to `set_request_listener`, by default to nobody."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._report: RequestListener = _no_listener
        self._report_failure: FailureListener = _no_failure_listener
        self._run_request: RequestRunner = run_directly

    def set_request_runner(self, runner: RequestRunner) -> None:
        self._run_request = runner

    def set_request_listener(self, listener: RequestListener) -> None:
        self._report = listener

    def set_failure_listener(self, listener: FailureListener) -> None:
        self._report_failure = listener
