"""The fsspec store: which URLs reach it, and what it costs on a real S3 server through s3fs
(the behaviour suite in test_store.py runs over fsspec+memory, fsspec+file, fsspec+s3)."""

from __future__ import annotations

import importlib.util
import os
import threading
from collections import Counter
from pathlib import Path

import pytest

from harness.agent_process import free_port
from objectstore import (
    CountingStore,
    ObjectStoreError,
    RequestCounts,
    RetriableStoreError,
    RetryingStore,
    RetryPolicy,
    S3Store,
    UnsupportedUrlError,
    open_backend,
    open_store,
)
from objectstore.fsspec_store import FsspecStore, translate
from objectstore.s3 import DEFAULT_MULTIPART_THRESHOLD, DEFAULT_PART_SIZE
from objectstore.s3fs_store import READ_BUFFER, S3fsStore
from objectstore.testserver import RecordingMotoServer
from settings import SettingError
from settings.load import load_settings
from tests.objectstore.test_store import client_error


def fsspec_s3(s3_url: str) -> str:
    return f"fsspec+{s3_url}"


def nonzero(counts: RequestCounts) -> dict[str, int]:
    return {k: v for k, v in counts.as_dict().items() if v and not k.startswith("bytes")}


# ------------------------------------------------------------ URLs


def test_urls_route_to_fsspec_without_taking_native_schemes(tmp_path: Path) -> None:
    assert type(open_backend("fsspec+memory://x")) is FsspecStore
    assert type(open_backend(f"fsspec+file://{tmp_path}/o")) is FsspecStore
    assert isinstance(open_backend("fsspec+s3://bucket/prefix"), S3fsStore)
    assert isinstance(open_backend("s3a://bucket/prefix"), S3fsStore)
    assert isinstance(open_backend("s3://bucket/prefix"), S3Store)  # boto3 keeps s3://
    assert type(open_backend("memory://x")) is not FsspecStore
    assert isinstance(open_store("fsspec+memory://x"), CountingStore)
    for bad in ("bogus://b/p", "simplecache::s3://b/p", "blockcache://b/p", "fsspec+nope://b"):
        with pytest.raises(UnsupportedUrlError, match="use file:///path"):
            open_backend(bad)
    with pytest.raises(UnsupportedUrlError, match="no bucket"):
        open_backend("fsspec+s3://")


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs installed")
def test_a_missing_implementation_is_one_line_naming_the_package() -> None:
    with pytest.raises(UnsupportedUrlError) as err:
        open_backend("gcs://bucket/prefix")
    assert "gcsfs" in str(err.value) and "\n" not in str(err.value)


def test_settings_accept_fsspec_urls_and_reject_the_rest() -> None:
    assert load_settings(None, {"SILT_STORE": "gcs://b/p"}).store.url == "gcs://b/p"
    assert load_settings(None, {"SILT_STORE": "fsspec+s3://b/p"}).store.url == "fsspec+s3://b/p"
    with pytest.raises(SettingError, match=r"store\.url=bogus://b.*any fsspec URL"):
        load_settings(None, {"SILT_STORE": "bogus://b"})


def test_errors_follow_the_store_contract() -> None:
    wrapped = FileNotFoundError("s3fs says so")  # s3fs raises its translation "from" botocore's
    wrapped.__cause__ = client_error("NoSuchKey", 404, "GetObject")
    assert type(translate(wrapped, "get k")) is FileNotFoundError
    slow = OSError(5, "SlowDown")
    slow.__cause__ = client_error("SlowDown", 503, "PutObject")
    assert isinstance(translate(slow, "put k"), RetriableStoreError)
    assert isinstance(translate(TimeoutError(), "get k"), RetriableStoreError)
    assert isinstance(translate(ConnectionResetError(), "get k"), RetriableStoreError)
    assert type(translate(IsADirectoryError(), "get k")) is FileNotFoundError

    class HttpError(Exception):
        def __init__(self, code: int) -> None:
            super().__init__(f"HTTP {code}")
            self.code = code

    assert isinstance(translate(HttpError(503), "get k"), RetriableStoreError)
    assert isinstance(translate(HttpError(429), "get k"), RetriableStoreError)
    assert type(translate(HttpError(403), "get k")) is PermissionError
    other = translate(OSError("disk on fire"), "put k")
    assert type(other) is ObjectStoreError and not other.retriable


def test_large_uploads_appear_only_at_close_on_a_filesystem(tmp_path: Path) -> None:
    store = open_store(f"fsspec+file://{tmp_path}/o")
    big = os.urandom(DEFAULT_MULTIPART_THRESHOLD + 1000)
    with store.put_stream("big") as w:
        w.write(big)
        assert w._file is not None  # type: ignore[attr-defined]  # streaming already
        assert list(store.list()) == []  # through a temporary file
    assert store.get("big") == big
    w = store.put_stream("gone")
    w.write(big)
    w.abort()
    assert [o.key for o in store.list()] == ["big"]
    assert list(tmp_path.glob("o/**/*")) == [tmp_path / "o/big"]


def test_a_small_streamed_upload_is_one_retried_request(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(f"fsspec+file://{tmp_path}/o",
                       retry=RetryPolicy(attempts=3, base_delay_s=0.0))
    assert isinstance(store, CountingStore) and isinstance(store.inner, RetryingStore)
    retrying, backend = store.inner, store.inner.inner
    assert isinstance(backend, FsspecStore)
    pipe = backend.fs.pipe_file
    failures = [ConnectionResetError("reset"), TimeoutError("timed out")]

    def flaky(path: str, data: bytes) -> None:
        if failures:
            raise failures.pop(0)
        pipe(path, data)

    monkeypatch.setattr(backend.fs, "pipe_file", flaky)
    with store.put_stream("small") as w:
        w.write(b"data")
    assert store.get("small") == b"data" and not failures
    assert retrying.retries == 2


# ------------------------------------------------------------ s3fs on the moto server


def test_one_get_per_stream_on_the_server(s3_url: str, moto_server: RecordingMotoServer) -> None:
    store = open_store(fsspec_s3(s3_url))
    data = os.urandom(100_000)
    store.put("obj", data)
    moto_server.clear_log()
    with store.open_stream("obj", 1000, 90_000) as s:
        pieces = [s.read(7) for _ in range(100)]
        assert 0 < len(s._buf) <= READ_BUFFER  # type: ignore[attr-defined]  # no range copy
        rest = s.read()
    assert b"".join(pieces) + rest == data[1000:90_000]
    assert [(r.operation, r.range) for r in moto_server.requests] == [("GET", "bytes=1000-89999")]
    moto_server.clear_log()
    assert store.get("obj") == data
    assert [(r.operation, r.range) for r in moto_server.requests] == [("GET", None)]


def test_fsspec_cat_file_reads_are_one_ranged_get(s3_url: str,
                                                  moto_server: RecordingMotoServer) -> None:
    """The generic path (any fsspec filesystem) over s3fs: one GET, exactly the range."""
    store = FsspecStore(fsspec_s3(s3_url), "s3")
    store.put("obj", bytes(range(256)) * 400)
    moto_server.clear_log()
    with store.open_stream("obj", 100, 20_100) as s:
        got = b"".join(s.read(13) for _ in range(2000))
    assert got == (bytes(range(256)) * 400)[100:20_100]
    assert [(r.operation, r.range) for r in moto_server.requests] == [("GET", "bytes=100-20099")]


def test_requests_as_claimed_and_counted_as_served(s3_url: str,
                                                   moto_server: RecordingMotoServer) -> None:
    store = open_store(fsspec_s3(s3_url))
    seen: Counter[str] = Counter()

    def take() -> dict[str, int]:
        """What the server served since the last call (and remember it)."""
        counts = moto_server.counts()
        moto_server.clear_log()
        seen.update(counts)
        return dict(counts)

    take()
    store.put("a/small", b"x" * 1000)
    with store.put_stream("a/streamed") as w:
        w.write(b"y" * 1000)
    assert take() == {"PUT": 2}

    part = b"z" * (DEFAULT_PART_SIZE // 2)
    with store.put_stream("a/big") as w:
        for _ in range(5):  # 20 MiB: past the threshold, so multipart
            w.write(part)
    parts = take()
    assert parts.pop("UploadPart") >= 2
    assert parts == {"CreateMultipartUpload": 1, "CompleteMultipartUpload": 1}

    w = store.put_stream("a/aborted")
    for _ in range(5):
        w.write(part)
    w.abort()
    assert take()["AbortMultipartUpload"] == 1

    assert [o.key for o in store.list("a/")] == ["a/big", "a/small", "a/streamed"]
    assert store.size("a/big") == 5 * len(part)
    store.delete_many([f"d/{i}" for i in range(1500)])
    assert take() == {"LIST": 1, "HEAD": 1, "DELETE": 2}

    # Every request the server saw, the client counted, type by type.
    assert nonzero(store.counters()) == dict(seen)
    bucket = s3_url[5:].split("/")[0]
    import boto3

    assert boto3.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_missing_bucket_and_key(moto_server: RecordingMotoServer, s3_url: str) -> None:
    store = open_store("fsspec+s3://no-such-bucket-here/p")
    with pytest.raises(FileNotFoundError):
        store.get("k")
    with pytest.raises(FileNotFoundError):
        open_store(fsspec_s3(s3_url)).size("nope")


def test_s3fs_and_botocore_do_not_retry_behind_our_back(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()  # nothing listens on it: connection refused
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store = open_store("fsspec+s3://bucket/p", retry=None)
    with pytest.raises(RetriableStoreError):
        store.get_range("k", 0, 10)
    with pytest.raises(RetriableStoreError):
        store.put("k", b"x")
    assert nonzero(store.counters()) == {"GET": 1, "PUT": 1}  # one attempt each


def test_many_open_streams_do_not_wait_for_a_pooled_connection(s3_url: str) -> None:
    """A compaction holds two streams open per input: more than any fixed pool size."""
    store = open_store(fsspec_s3(s3_url))
    size = 1 << 20  # a body the connection cannot have delivered whole: it stays busy
    for i in range(40):
        store.put(f"o/{i}", bytes([i]) * size)
    done: list[bytes] = []

    def read_all() -> None:
        streams = [store.open_stream(f"o/{i}", 0, size) for i in range(40)]
        firsts = [s.read(1) for s in streams]  # every body is open and unread
        done.extend(f + s.read() for f, s in zip(firsts, streams, strict=True))
        for s in streams:
            s.close()

    worker = threading.Thread(target=read_all, daemon=True)
    worker.start()
    worker.join(120)  # a liveness bound: with a bounded pool the 11th open waits forever
    assert not worker.is_alive(), "opening streams blocked on the connection pool"
    assert done == [bytes([i]) * size for i in range(40)]


@pytest.mark.parametrize("scheme", ["fsspec+memory", "fsspec+file"])
def test_deleting_a_key_that_looks_like_a_glob_deletes_only_it(scheme: str,
                                                              tmp_path: Path) -> None:
    store = open_store(f"{scheme}://{tmp_path}/g")
    for k in ["a*", "ab", "a[b]", "c?"]:
        store.put(k, b"x")
    store.delete_many(["a*", "a[b]", "missing*"])
    assert [o.key for o in store.list()] == ["ab", "c?"]
