"""Local backends: a directory (`file://`, the embedded default) and process memory
(`memory://`, for tests). They report the same logical requests S3 would make."""

from __future__ import annotations

import io
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from .base import (
    ABORT_MULTIPART,
    DELETE,
    GET,
    HEAD,
    LIST,
    LIST_MULTIPART,
    PUT,
    Backend,
    ObjectInfo,
    ObjectWriter,
    ReadStream,
    RequestListener,
    StreamBase,
    UnfinishedUpload,
    WriterBase,
)
from .errors import InvalidRangeError

COPY_BLOCK = 1 << 20


def _bad_range(start: int, end: int | None) -> bool:
    return start < 0 or (end is not None and end < start)


def _check_range(key: str, size: int, start: int, end: int | None) -> int:
    """The range's end, or InvalidRangeError (naming the object) exactly where S3 would
    answer 416 or short."""
    if end is None:
        if start == 0:
            return size
        end = size if start < size else -1  # S3: `bytes=N-` with N >= size is 416
    if start < 0 or end < start or end > size:
        raise InvalidRangeError(
            f"range [{start}, {end}) outside object {key!r} of {size} bytes")
    return end


def _empty_stream(on_read: RequestListener) -> _FileRangeStream:
    """The stream over an empty range: no request is made, as on S3."""
    return _FileRangeStream(io.BytesIO(b""), 0, 0, on_read)


class _FileRangeStream(StreamBase):
    """Reads [start, end) of an open file forward-only."""

    def __init__(self, f: BinaryIO, start: int, end: int, on_read: RequestListener) -> None:
        self._f = f
        self._left = end - start
        self._on_read = on_read
        f.seek(start)

    def read(self, n: int = -1, /) -> bytes:
        if n < 0 or n > self._left:
            n = self._left
        data = self._f.read(n)
        self._left -= len(data)
        self._on_read("", 0, len(data))
        return data

    def close(self) -> None:
        self._f.close()


# An upload in progress: `.upload-<key's name>.<random>.tmp` beside the key's file. Named
# after its key so that deleting the key also deletes one a killed writer left behind
# (GC deletes the keys of stale pending files: the temp file of a process killed mid-upload
# goes with them, and `unfinished_uploads` finds the rest); never listed.
UPLOAD_PREFIX, UPLOAD_SUFFIX = ".upload-", ".tmp"


def _upload_of(name: str) -> str | None:
    """The key name a temp upload file name belongs to (None: not one)."""
    if not (name.startswith(UPLOAD_PREFIX) and name.endswith(UPLOAD_SUFFIX)):
        return None
    return name[len(UPLOAD_PREFIX):-len(UPLOAD_SUFFIX)].rpartition(".")[0] or None


class _LocalWriter(WriterBase):
    """Writes to a temporary file beside the target and renames it into place on close."""

    def __init__(self, path: Path, report: RequestListener) -> None:
        super().__init__(str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{UPLOAD_PREFIX}{path.name}.",
                                   suffix=UPLOAD_SUFFIX)
        self._f = os.fdopen(fd, "wb")
        self._tmp = Path(tmp)
        self._path = path
        self._report = report

    def _write(self, data: bytes) -> None:
        self._f.write(data)

    def _commit(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self._tmp, self._path)
        _fsync_dir(self._path.parent)
        self._report(PUT, self._n, 0)

    def _discard(self) -> None:
        self._f.close()
        self._tmp.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (POSIX); a no-op where directories can't be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class FileStore(Backend):
    """Objects as files under a root directory; writes are atomic (temp file + rename).
    Opening creates nothing: the first write creates the directories it needs, and a
    missing root reads as an empty store."""

    def __init__(self, root: str | Path, url: str | None = None) -> None:
        self.root = Path(root)
        self._root = str(self.root)
        super().__init__(url or f"file://{self.root}")

    def _path(self, key: str) -> Path:
        return Path(self._file(key))

    def _file(self, key: str) -> str:
        """The key's file name (string operations only: a fetch's segment GET pays for
        this, and pathlib's parsing cost more than the read of a small segment)."""
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"invalid object key {key!r}")
        return f"{self._root}/{key}"

    def put(self, key: str, data: bytes) -> None:
        with self.put_stream(key) as w:
            w.write(data)

    def put_stream(self, key: str) -> ObjectWriter:
        return _LocalWriter(self._path(key), self._report)

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        opened = self._open_range(key, start, end)
        if opened is None:
            return _empty_stream(self._report)
        fd, stop = opened
        return _FileRangeStream(os.fdopen(fd, "rb"), start, stop, self._report)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """The range in one pread(2): no buffered file nor stream object (a fetch reads a
        segment this way)."""
        opened = self._open_range(key, start, end)
        if opened is None:
            return b""
        fd, stop = opened
        try:
            data = os.pread(fd, stop - start, start)
        finally:
            os.close(fd)
        self._report("", 0, len(data))
        return data

    def get_range_writable(self, key: str, start: int, end: int) -> bytearray:
        """The range read straight into a new bytearray (preadv(2)): its only copy."""
        opened = self._open_range(key, start, end)
        if opened is None:
            return bytearray()
        fd, stop = opened
        data = bytearray(stop - start)
        try:
            view, done = memoryview(data), 0
            while done < len(data):
                n = os.preadv(fd, [view[done:]], start + done)
                if n == 0:  # the file shrank under us: objects are never rewritten
                    raise OSError(f"{key}: short read at {start + done}")
                done += n
        finally:
            os.close(fd)
        self._report("", 0, len(data))
        return data

    def _open_range(self, key: str, start: int, end: int | None) -> tuple[int, int] | None:
        """The key's file opened for [start, end) and the range's end, its GET counted;
        None for an empty range (nothing opened nor counted, as S3 makes no request).
        InvalidRangeError where S3 answers 416; FileNotFoundError for a missing key."""
        path = self._file(key)
        if _bad_range(start, end):
            raise InvalidRangeError(f"bad range [{start}, {end}) for {key!r}")
        if end == start:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            stop = _check_range(key, os.fstat(fd).st_size, start, end)
        except BaseException:
            os.close(fd)
            raise
        self._report(GET, 0, 0)
        return fd, stop

    def size(self, key: str) -> int:
        self._report(HEAD, 0, 0)
        return self._path(key).stat().st_size

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the keys' files, and any upload of them a killed writer left (one
        directory scan per directory the keys are in)."""
        batch = list(keys)
        names: dict[Path, set[str]] = {}
        for i in range(0, len(batch), 1000):
            self._report(DELETE, 0, 0)
            for key in batch[i : i + 1000]:
                path = self._path(key)
                path.unlink(missing_ok=True)
                names.setdefault(path.parent, set()).add(path.name)
        for directory, deleted in names.items():
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                continue
            for entry in entries:
                if _upload_of(entry.name) in deleted:
                    Path(entry.path).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self._report(LIST, 0, 0)
        found = []
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                if _upload_of(name) is not None:
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    st = full.stat()
                    found.append(ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000))
        yield from sorted(found, key=lambda o: o.key)

    def unfinished_uploads(self, started_before_ms: int) -> Sequence[UnfinishedUpload]:
        """The temporary files of uploads last written before `started_before_ms` (one
        directory walk): `upload_id` is the file's name."""
        self._report(LIST_MULTIPART, 0, 0)
        found = []
        for dirpath, _, files in os.walk(self.root):
            for name in files:
                target = _upload_of(name)
                if target is None:
                    continue
                try:
                    modified = (Path(dirpath) / name).stat().st_mtime_ns // 1_000_000
                except FileNotFoundError:  # finished or aborted since the walk saw it
                    continue
                if modified < started_before_ms:
                    key = (Path(dirpath) / target).relative_to(self.root).as_posix()
                    found.append(UnfinishedUpload(key, name, modified))
        return sorted(found, key=lambda u: (u.key, u.upload_id))

    def abort_upload(self, upload: UnfinishedUpload) -> None:
        path = self._path(upload.key)
        if _upload_of(upload.upload_id) != path.name or "/" in upload.upload_id:
            raise ValueError(f"{upload.upload_id!r} is no upload of {upload.key!r}")
        self._report(ABORT_MULTIPART, 0, 0)
        (path.parent / upload.upload_id).unlink()


_MEMORY: dict[str, dict[str, bytes]] = {}
_MEMORY_LOCK = threading.Lock()


class _MemoryWriter(WriterBase):
    def __init__(self, store: MemoryStore, key: str) -> None:
        super().__init__(repr(key))
        self._store = store
        self._key = key
        self._buf = io.BytesIO()

    def _write(self, data: bytes) -> None:
        self._buf.write(data)

    def _commit(self) -> None:
        self._store.put(self._key, self._buf.getvalue())

    def _discard(self) -> None:
        pass


class MemoryStore(Backend):
    """Objects in a process-wide dict; each `memory://name` is its own namespace. It keeps
    no modification times: listed objects have `modified_ms` None."""

    def __init__(self, name: str = "") -> None:
        super().__init__(f"memory://{name}")
        with _MEMORY_LOCK:
            self._objects = _MEMORY.setdefault(name, {})

    def _get(self, key: str) -> bytes:
        try:
            return self._objects[key]
        except KeyError:
            raise FileNotFoundError(f"no object {key!r} in {self.url}") from None

    def put(self, key: str, data: bytes) -> None:
        self._report(PUT, len(data), 0)
        with _MEMORY_LOCK:
            self._objects[key] = bytes(data)

    def put_stream(self, key: str) -> ObjectWriter:
        return _MemoryWriter(self, key)

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        if _bad_range(start, end):
            raise InvalidRangeError(f"bad range [{start}, {end}) for {key!r}")
        if end == start:
            return _empty_stream(self._report)
        data = self._get(key)
        stop = _check_range(key, len(data), start, end)
        self._report(GET, 0, 0)
        return _FileRangeStream(io.BytesIO(data), start, stop, self._report)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self.open_stream(key, start, end) as s:
            return s.read()

    def size(self, key: str) -> int:
        self._report(HEAD, 0, 0)
        return len(self._get(key))

    def delete_many(self, keys: Iterable[str]) -> None:
        batch = list(keys)
        for i in range(0, len(batch), 1000):
            self._report(DELETE, 0, 0)
            with _MEMORY_LOCK:
                for key in batch[i : i + 1000]:
                    self._objects.pop(key, None)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self._report(LIST, 0, 0)
        with _MEMORY_LOCK:
            items = sorted((k, len(v)) for k, v in self._objects.items() if k.startswith(prefix))
        for k, n in items:
            yield ObjectInfo(k, n)
