"""Any fsspec filesystem as a store: `gcs://`, `abfs://`, `hdfs://`, … and `fsspec+P://` for
any fsspec protocol P (`fsspec+s3://` is S3 through s3fs; `s3://` stays on boto3).

Requests, by fsspec call:
- a read is one `cat_file` over exactly the range asked for: one ranged GET on an object
  store, never fsspec's read-ahead blocks. The stream then serves that range from memory;
  s3fs streams it from the GET's body instead (objectstore.s3fs_store);
- `put`, and a streaming upload that stays under the multipart threshold, is one
  `pipe_file` (one PUT) at close; a larger upload streams through `open(path, "wb",
  autocommit=False)` (multipart on object stores) and appears at `commit`;
- `size` is one `info`, `delete_many` one `rm` per 1,000 keys, `list` one `find` under the
  deepest directory of the prefix (object-store filesystems list by the prefix itself).
Counts are logical here (one per call, as the local backends count them); s3fs's are per
HTTP request. Options (credentials, endpoints, projects) come from the filesystem's own
fsspec configuration (`FSSPEC_<PROTOCOL>_<OPTION>` variables, fsspec's config directory):
siltstream adds no setting of its own.

What a crash leaves: before `close` of a large upload, nothing under the key (an unfinished
multipart upload, reaped by the bucket's lifecycle rule; a local temporary file); during a
`pipe_file`, nothing on object stores (a PUT is atomic) but possibly a truncated file on a
real filesystem (local, HDFS). Objects are written under fresh keys and committed to
metadata only after `close` returns, so such a file is an orphan that nothing reads.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.registry import get_filesystem_class
from fsspec.spec import AbstractFileSystem

from . import s3
from .base import (
    DELETE,
    GET,
    HEAD,
    LIST,
    PUT,
    Backend,
    ObjectInfo,
    ObjectWriter,
    ReadStream,
    WriterBase,
)
from .config import URL_FORMS, fsspec_protocol
from .errors import InvalidRangeError, ObjectStoreError, RetriableStoreError, UnsupportedUrlError
from .local import _bad_range, _empty_stream, _FileRangeStream

DELETE_BATCH = 1000
GLOB_CHARS = "*?["  # what fsspec's rm would expand
S3FS_PROTOCOLS = ("s3", "s3a")  # served by S3fsStore: streaming reads, per-request counts

T = TypeVar("T")


def translate(exc: Exception, what: str) -> Exception:
    """Map a filesystem's error to the store's contract (see objectstore.base).

    A botocore error anywhere in the cause chain (s3fs wraps them in OSErrors) goes through
    S3's table; an HTTP status on the error (gcsfs, adlfs) through the same table by code;
    the built-in missing/denied/exists errors stay; timeouts and dropped connections are
    retriable; everything else is an ObjectStoreError.
    """
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ClientError | BotoCoreError):
            return s3.translate(cause, what)
        cause = cause.__cause__
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
        return FileNotFoundError(f"{what}: no such object")
    if isinstance(exc, PermissionError | FileExistsError):
        return type(exc)(f"{what}: {exc}")
    if isinstance(exc, TimeoutError | ConnectionError):  # asyncio's and fsspec's timeouts too
        return RetriableStoreError(f"{what}: {exc!r}")
    status = next((getattr(exc, a) for a in ("status_code", "status", "code")
                   if isinstance(getattr(exc, a, None), int)), None)
    cls = s3.ERROR_TABLE.get(str(status), ObjectStoreError)
    return cls(f"{what}: {exc}")


# Where filesystems put an object's last write time in their listings: s3fs, adlfs,
# gcsfs and the local filesystem; fsspec's memory filesystem has only the creation time,
# which is the last write's (every write makes a new file).
MODIFIED_FIELDS = ("LastModified", "last_modified", "updated", "mtime", "created")


def modified_ms(info: dict[str, Any]) -> int | None:
    """A listed object's last write time (epoch ms), None if the filesystem gives none."""
    for name in MODIFIED_FIELDS:
        value = info.get(name)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = datetime.fromisoformat(value)
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, int | float):
            return int(value * 1000)
    return None


class _FsspecWriter(WriterBase):
    """Buffers up to the store's threshold and puts the object with one `pipe_file` at
    close; past it, streams through `open(..., autocommit=False)` and commits at close."""

    def __init__(self, store: FsspecStore, key: str) -> None:
        super().__init__(repr(key))
        self._s = store
        self._path = store._path(key)
        self._what = f"upload {store.what(key)}"
        self._buf = bytearray()
        self._file: Any = None  # the streaming file, once past the threshold

    def _write(self, data: bytes) -> None:
        if self._file is None:
            self._buf += data
            if len(self._buf) < self._s.stream_threshold:
                return
            data, self._buf = bytes(self._buf), bytearray()
        try:
            if self._file is None:
                self._file = self._s.call(self._what, lambda: self._s.fs.open(
                    self._path, "wb", block_size=self._s.part_size, autocommit=False))
            self._s.call(self._what, lambda: self._file.write(data))
        except BaseException:
            self.abort()
            raise

    def _commit(self) -> None:
        if self._file is None:  # one request: run by the retry policy (a RetryingStore)
            data = bytes(self._buf)
            self._s._run_request(lambda: self._s.call(
                self._what, lambda: self._s.fs.pipe_file(self._path, data)))
        else:  # a filesystem's own file: its parts are not ours to repeat
            self._s.call(self._what, self._file.close)
            self._s.call(self._what, self._file.commit)
        self._buf = bytearray()
        self._s.request(PUT, self._n)

    def _discard(self) -> None:
        self._buf = bytearray()
        if self._file is not None:
            # Discard before close, so that close sends no last part; if either fails, the
            # bucket's lifecycle rule reaps the unfinished upload.
            with contextlib.suppress(Exception):
                self._file.discard()
            with contextlib.suppress(Exception):
                self._file.close()


class FsspecStore(Backend):
    """Objects under a root path of one fsspec filesystem (`fs`)."""

    part_size = s3.DEFAULT_PART_SIZE

    def __init__(self, url: str, protocol: str | None = None,
                 storage_options: dict[str, Any] | None = None) -> None:
        protocol = protocol or fsspec_protocol(url)
        if protocol is None:
            raise UnsupportedUrlError(f"not an fsspec URL: {url!r}; use {URL_FORMS}")
        super().__init__(url)
        self.protocol = protocol
        try:
            cls = get_filesystem_class(protocol)
            options = {"skip_instance_cache": True, "use_listings_cache": False,
                       **self._options(cls), **(storage_options or {})}
            fs, root = url_to_fs(f"{protocol}://{url.split('://', 1)[1]}", **options)
        except ImportError as exc:  # fsspec's message names the package to install
            raise UnsupportedUrlError(f"{url}: {exc}") from exc
        except Exception as exc:  # a filesystem that connects when made (ftp, sftp, smb, ...)
            raise translate(exc, f"open {url}") from exc
        self.fs: AbstractFileSystem = fs
        self.root = str(root).rstrip("/")
        # Objects under this size go up with one pipe_file; fsspec's memory filesystem
        # shows an open file at once, so there every object does.
        self.stream_threshold = (1 << 62 if isinstance(fs, MemoryFileSystem)
                                 else s3.DEFAULT_MULTIPART_THRESHOLD)

    def _options(self, cls: type[AbstractFileSystem]) -> dict[str, Any]:
        """Storage options this store needs from a filesystem of class `cls`."""
        return {"auto_mkdir": True} if issubclass(cls, LocalFileSystem) else {}

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """fn(), its errors translated to the store's contract."""
        try:
            return fn()
        except (ObjectStoreError, ValueError):
            raise
        except Exception as exc:
            raise translate(exc, what) from exc

    def request(self, op: str, sent: int = 0) -> None:
        """Report one logical request (a subclass that sees HTTP requests reports those)."""
        self._report(op, sent, 0)

    def _path(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"invalid object key {key!r}")
        return f"{self.root}/{key}"

    def what(self, key: str) -> str:
        """The object's URL, for messages."""
        return f"{self.url.rstrip('/')}/{key}"

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        self.call(f"put {self.what(key)}", lambda: self.fs.pipe_file(path, data))
        self.request(PUT, len(data))

    def put_stream(self, key: str) -> ObjectWriter:
        return _FsspecWriter(self, key)

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        what = f"get {self.what(key)}"
        path = self._path(key)
        if _bad_range(start, end):
            raise InvalidRangeError(f"{what}: bad range [{start}, {end})")
        if end == start:
            return _empty_stream(self._report)
        data = self.call(what, lambda: self.fs.cat_file(path, start=start, end=end))
        self.request(GET)
        if (end is not None and len(data) != end - start) or (start and not data):
            raise InvalidRangeError(f"{what}: range [{start}, {end}) outside the object")
        return _FileRangeStream(io.BytesIO(data), 0, len(data), self._report)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self.open_stream(key, start, end) as s:
            return s.read()

    def size(self, key: str) -> int:
        what = f"head {self.what(key)}"
        path = self._path(key)
        info = self.call(what, lambda: self.fs.info(path))
        self.request(HEAD)
        if info.get("type") != "file":
            raise FileNotFoundError(f"{what}: no such object")
        return int(info["size"])

    def delete_many(self, keys: Iterable[str]) -> None:
        paths = [self._path(k) for k in keys]
        for i in range(0, len(paths), DELETE_BATCH):
            batch = paths[i : i + DELETE_BATCH]
            self.call(f"delete in {self.url}", functools.partial(self._rm, batch))
            self.request(DELETE)

    def _rm(self, paths: list[str]) -> None:
        """Remove `paths`; missing ones are no error (object stores ignore them in a batch,
        a real filesystem raises on the first: then it goes path by path). `rm` expands
        glob patterns, so a key that looks like one is removed by itself."""
        globs = [p for p in paths if any(c in p for c in GLOB_CHARS)]
        try:
            if len(globs) < len(paths):
                self.fs.rm([p for p in paths if p not in globs])
        except FileNotFoundError:
            globs = paths
        for p in globs:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(p)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        base = f"{self.root}/"
        where, _, stem = f"{base}{prefix}".rpartition("/")
        # `prefix=` lists by the stem server-side where the filesystem supports it (s3fs,
        # gcsfs, adlfs); others ignore it and the filter below does the work.
        found = self.call(f"list {self.url}/{prefix}", lambda: self.fs.find(
            where, detail=True, **({"prefix": stem} if stem else {})))
        self.request(LIST)
        out = []
        for name, info in found.items():
            key = str(name)[len(base):]
            if str(name).startswith(base) and key.startswith(prefix) and key \
                    and info.get("type") == "file":
                out.append(ObjectInfo(key, int(info["size"]), modified_ms(info)))
        yield from sorted(out, key=lambda o: o.key)


def open_fsspec(url: str) -> FsspecStore:
    """The fsspec store for `url`: s3fs gets its own subclass (streaming reads, counts per
    HTTP request), every other filesystem the generic store."""
    protocol = fsspec_protocol(url)
    if protocol in S3FS_PROTOCOLS:
        try:
            from .s3fs_store import S3fsStore
        except ImportError as exc:
            raise UnsupportedUrlError(f"{url}: needs s3fs (pip install 'siltstream[s3fs]'):"
                                      f" {exc}") from exc
        return S3fsStore(url, protocol)
    return FsspecStore(url, protocol)


__all__ = ["FsspecStore", "open_fsspec", "translate"]
