"""One behaviour suite over memory://, file:// and a real moto S3 server, plus the
server-side proof of the request-count claims."""

from __future__ import annotations

import dataclasses
import io
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)

from objectstore import (
    MTIME_SLACK_MS,
    CountingStore,
    FileStore,
    InvalidRangeError,
    MemoryStore,
    ObjectStore,
    ObjectStoreError,
    ReadStream,
    RequestCounts,
    RetriableStoreError,
    RetryingStore,
    RetryPolicy,
    S3Store,
    StoreWrapper,
    ThrottledError,
    UnsupportedUrlError,
    open_backend,
    open_store,
)
from objectstore.s3 import DEFAULT_REGION, MIN_PART_SIZE, translate
from objectstore.testserver import RecordingMotoServer, ServedRequest


def client_error(code: str, status: int, operation: str, message: str | None = None
                 ) -> ClientError:
    """A ClientError shaped as botocore builds it (the stubs require full ResponseMetadata)."""
    return ClientError({"Error": {"Code": code} if message is None
                        else {"Code": code, "Message": message},
                        "ResponseMetadata": {"RequestId": "", "HostId": "",
                                             "HTTPStatusCode": status, "HTTPHeaders": {},
                                             "RetryAttempts": 0}}, operation)


@pytest.fixture(params=["memory", "file", "s3", "fsspec+memory", "fsspec+file", "fsspec+s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """Every backend; `fsspec+…`: the same store through fsspec (s3fs for S3)."""
    scheme = str(request.param)
    prefix = scheme[: -len(scheme.rsplit("+", 1)[-1])]
    if scheme.endswith("memory"):
        yield open_store(f"{prefix}memory://suite-{os.urandom(4).hex()}")
    elif scheme.endswith("file"):
        yield open_store(f"{prefix}file://{tmp_path}/objects")
    else:
        yield open_store(prefix + request.getfixturevalue("s3_url"))


def test_put_get_range_list_delete(store: ObjectStore) -> None:
    store.put("a/1", b"hello world")
    with store.put_stream("a/2") as w:
        w.write(b"abc")
        w.write(b"def")
    store.put("b/3", b"")
    assert store.get("a/1") == b"hello world"
    assert store.get_range("a/1", 6, 11) == b"world"
    assert store.get("a/2") == b"abcdef"
    assert store.size("a/2") == 6
    assert [(o.key, o.size) for o in store.list("a/")] == [("a/1", 11), ("a/2", 6)]
    assert [o.key for o in store.list()] == ["a/1", "a/2", "b/3"]
    store.delete_many(["a/1", "missing"])
    assert [o.key for o in store.list("a/")] == ["a/2"]


def test_missing_key_and_bad_range(store: ObjectStore) -> None:
    with pytest.raises(FileNotFoundError):
        store.get("nope")
    with pytest.raises(FileNotFoundError):
        store.open_stream("nope", 0, 10)
    store.put("x", b"0123456789")
    with pytest.raises(InvalidRangeError):
        store.get_range("x", 5, 20)


def test_stream_reads_forward_in_small_pieces(store: ObjectStore) -> None:
    data = bytes(range(256)) * 100
    store.put("obj", data)
    before = store.counters()
    with store.open_stream("obj", 100, 20_100) as s:
        pieces = [s.read(7) for _ in range(1000)]
        rest = s.read()
        assert s.read(5) == b""
    assert b"".join(pieces) + rest == data[100:20_100]
    used = store.counters() - before
    assert used.GET == 1 and used.bytes_received == 20_000


def test_aborted_upload_leaves_nothing(store: ObjectStore) -> None:
    with pytest.raises(RuntimeError), store.put_stream("gone") as w:
        w.write(b"partial")
        raise RuntimeError("crash mid-upload")
    assert list(store.list("gone")) == []


# ------------------------------------------------------------ server-side request records


def test_one_get_per_stream_on_the_server(s3_url: str, moto_server: RecordingMotoServer) -> None:
    store = open_store(s3_url)
    store.put("obj", b"x" * 100_000)
    moto_server.clear_log()
    with store.open_stream("obj", 1000, 90_000) as s:
        while s.read(4096):
            pass
    served = moto_server.requests
    assert [r.operation for r in served] == ["GET"]
    assert served[0].range == "bytes=1000-89999"


def test_multipart_upload_as_claimed(s3_url: str, moto_server: RecordingMotoServer) -> None:
    store = open_store(s3_url)
    before = store.counters()
    moto_server.clear_log()
    data = os.urandom(20 * 1024 * 1024)
    with store.put_stream("big") as w:
        for i in range(0, len(data), 1 << 20):
            w.write(data[i : i + (1 << 20)])
    server = moto_server.counts()
    assert server == {"CreateMultipartUpload": 1, "UploadPart": 3, "CompleteMultipartUpload": 1}
    client = (store.counters() - before).as_dict()
    assert {k: v for k, v in client.items() if v and not k.startswith("bytes")} == server
    assert store.get("big") == data
    moto_server.clear_log()
    with store.put_stream("small") as w:
        w.write(b"tiny")
    assert moto_server.counts() == {"PUT": 1}


def test_delete_many_batches_requests(s3_url: str, moto_server: RecordingMotoServer) -> None:
    store = open_store(s3_url)
    keys = [f"k{i:04d}" for i in range(1500)]
    for k in keys[:3]:
        store.put(k, b"1")
    moto_server.clear_log()
    store.delete_many(keys)
    assert moto_server.counts() == {"DELETE": 2}
    assert list(store.list()) == []


def test_missing_bucket_is_file_not_found(moto_server: RecordingMotoServer,
                                          s3_url: str) -> None:
    store = open_store("s3://no-such-bucket-here/x")
    with pytest.raises(FileNotFoundError, match="bucket"):
        store.put("k", b"v")


# ------------------------------------------------------------ retry policy and translation


class Flaky(StoreWrapper):
    """A store whose `size` fails `failures` times with `error`, then answers 42."""

    def __init__(self, failures: int, error: Exception) -> None:
        super().__init__(MemoryStore("flaky"))
        self.calls = 0
        self.failures = failures
        self.error = error

    def size(self, key: str) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return 42


def test_retry_policy_retries_only_retriable_errors() -> None:
    flaky = Flaky(2, RetriableStoreError("SlowDown"))
    store = RetryingStore(flaky, RetryPolicy(attempts=5), sleep=lambda s: None)
    assert store.size("k") == 42 and flaky.calls == 3
    fatal = Flaky(2, PermissionError("AccessDenied"))
    store = RetryingStore(fatal, RetryPolicy(attempts=5), sleep=lambda s: None)
    with pytest.raises(PermissionError):
        store.size("k")
    assert fatal.calls == 1
    always = Flaky(99, RetriableStoreError("503"))
    store = RetryingStore(always, RetryPolicy(attempts=3), sleep=lambda s: None)
    with pytest.raises(RetriableStoreError):
        store.size("k")
    assert always.calls == 3


@pytest.mark.parametrize("code,status,expected", [
    ("NoSuchKey", 404, FileNotFoundError),
    ("NoSuchBucket", 404, FileNotFoundError),
    ("AccessDenied", 403, PermissionError),
    ("PreconditionFailed", 412, FileExistsError),
    ("InvalidRange", 416, InvalidRangeError),
    ("SlowDown", 503, ThrottledError),
    ("InternalError", 500, RetriableStoreError),
    ("", 503, ThrottledError),
    ("", 429, ThrottledError),
])
def test_error_table(code: str, status: int, expected: type[Exception]) -> None:
    err = client_error(code, status, "GetObject", "m")
    assert isinstance(translate(err, "get k"), expected)
    conn = translate(EndpointConnectionError(endpoint_url="http://x"), "get k")
    assert isinstance(conn, RetriableStoreError) and conn.retriable


# ------------------------------------------------------------ edge cases on every backend


def test_empty_object_and_range_edges(store: ObjectStore) -> None:
    store.put("empty", b"")
    assert store.get("empty") == b""
    assert store.size("empty") == 0
    store.put("x", b"0123456789")
    assert store.get_range("x", 9, 10) == b"9"
    with store.open_stream("x", 4) as s:
        assert s.read(100) == b"456789" and s.read(1) == b""
    with pytest.raises(InvalidRangeError):
        store.open_stream("x", 10)  # S3 answers 416 for `bytes=10-`; all backends agree
    with pytest.raises(InvalidRangeError):
        store.get_range("x", 5, 4)
    with pytest.raises(InvalidRangeError):
        store.get_range("x", -1, 4)
    before = store.counters()
    assert store.get_range("nope", 3, 3) == b""  # an empty range makes no request
    assert store.counters() - before == RequestCounts()


def test_a_writable_range_is_the_range_in_a_buffer_of_its_own(store: ObjectStore) -> None:
    data = os.urandom(300_000)  # past malloc's mmap threshold, and many pages
    store.put("x", data)
    before = store.counters()
    got = store.get_range_writable("x", 5, len(data) - 3)
    assert isinstance(got, bytearray) and got == data[5:-3]
    counted = store.counters() - before  # one ranged GET, as get_range
    assert (counted.GET, counted.bytes_received) == (1, len(got))
    got[:4] = b"\0\0\0\0"  # the caller's own: the store's object is untouched
    assert store.get_range_writable("x", 5, 9) == data[5:9]
    before = store.counters()
    assert store.get_range_writable("x", 7, 7) == bytearray()  # no request, as S3
    assert store.counters() - before == RequestCounts()
    with pytest.raises(InvalidRangeError):
        store.get_range_writable("x", 5, len(data) + 1)
    with pytest.raises(InvalidRangeError):
        store.get_range_writable("x", 5, 4)
    with pytest.raises(FileNotFoundError):
        store.get_range_writable("nope", 0, 10)


def test_writer_lifecycle(store: ObjectStore) -> None:
    w = store.put_stream("w")
    assert w.write(b"abc") == 3 and w.bytes_written == 3
    assert list(store.list("w")) == []  # nothing visible before close
    w.close()
    w.close()  # idempotent
    with pytest.raises(ValueError):
        w.write(b"more")
    assert store.get("w") == b"abc"
    w2 = store.put_stream("w")
    w2.write(b"replacement")
    w2.abort()
    with pytest.raises(ValueError):
        w2.write(b"x")
    assert store.get("w") == b"abc"  # an aborted overwrite leaves the old object


def test_keys_are_relative_and_listing_is_ordered(store: ObjectStore) -> None:
    for k in ["b", "a/2", "a/10", "a/1", "ab"]:
        store.put(k, k.encode())
    assert [o.key for o in store.list()] == sorted(["b", "a/2", "a/10", "a/1", "ab"])
    assert [o.key for o in store.list("a")] == ["a/1", "a/10", "a/2", "ab"]
    assert [o.key for o in store.list("zzz")] == []
    store.delete_many([])
    store.delete_many(o.key for o in store.list("a/"))
    assert [o.key for o in store.list()] == ["ab", "b"]


# ------------------------------------------------------------ URLs and local backends


def test_urls_select_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rel = open_backend("file://./silt-data/objects")
    assert isinstance(rel, FileStore) and rel.root.resolve() == tmp_path / "silt-data/objects"
    absolute = open_backend(f"file://{tmp_path}/abs")
    assert isinstance(absolute, FileStore) and absolute.root == tmp_path / "abs"
    assert isinstance(open_backend("memory://x"), MemoryStore)
    with pytest.raises(UnsupportedUrlError):
        open_backend("nosuch://bucket")  # gs:// goes to fsspec (test_fsspec_store.py)
    assert isinstance(open_store("memory://x"), CountingStore)
    assert isinstance(open_store("memory://x", counting=False), RetryingStore)
    assert isinstance(open_store("memory://x", counting=False, retry=None), MemoryStore)
    counted = open_store("memory://x", retry=None)
    assert isinstance(counted, CountingStore) and isinstance(counted.inner, MemoryStore)
    with pytest.raises(ValueError):
        open_store("s3:///no-bucket")


def test_memory_namespaces() -> None:
    ns = f"memory://ns-{os.urandom(4).hex()}"
    open_store(ns).put("k", b"1")
    assert open_store(ns).get("k") == b"1"  # shared within the process
    with pytest.raises(FileNotFoundError):
        open_store(ns + "-other").get("k")


def test_file_writes_are_atomic(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put("d/k", b"old")
    w = store.put_stream("d/k")
    w.write(b"new, half written")
    assert (tmp_path / "d/k").read_bytes() == b"old"
    assert [o.key for o in store.list()] == ["d/k"]  # the temp file is not an object
    w.abort()
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["k"]
    with pytest.raises(ValueError):
        store.put("../escape", b"x")
    for bad in ("../escape", "d/../../escape", "/etc/passwd", "", "d/.."):
        for read in (store.get_range, store.get_range_writable, store.open_stream):
            with pytest.raises(ValueError):
                read(bad, 0, 1)


def test_deleting_a_key_deletes_the_upload_a_killed_writer_left(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    writers = [store.put_stream(key) for key in ("d/k", "d/k2", "d/other")]
    for w in writers:  # never closed nor aborted (until the end): as a SIGKILL leaves them
        w.write(b"half")
    leftovers = sorted(p.name for p in (tmp_path / "d").iterdir())
    assert len(leftovers) == 3 and all(n.startswith(".upload-") for n in leftovers)
    assert list(store.list()) == []
    store.delete_many(["d/k", "d/k2", "e/absent"])  # as GC deletes a stale pending file's key
    (left,) = (tmp_path / "d").iterdir()
    assert left.name.startswith(".upload-other.")
    for w in writers:
        w.abort()  # closes the files (the deleted temp files too: no error)


def test_counting_is_thread_safe() -> None:
    store = open_store(f"memory://threads-{os.urandom(4).hex()}")

    def work(i: int) -> None:
        for j in range(200):
            store.put(f"{i}/{j}", b"xy")
            store.get(f"{i}/{j}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    c = store.counters()
    assert (c.PUT, c.GET, c.bytes_sent, c.bytes_received) == (1600, 1600, 3200, 3200)
    assert (c - c).as_dict() == RequestCounts().as_dict()


# ------------------------------------------------------------ S3 specifics


def test_s3_client_follows_aws_variables(s3_url: str, monkeypatch: pytest.MonkeyPatch,
                                         moto_server: RecordingMotoServer) -> None:
    s3 = S3Store(s3_url)
    assert s3.client.meta.endpoint_url == moto_server.endpoint_url
    assert s3.client.meta.config.retries["total_max_attempts"] == 1  # ours is the only policy
    assert (s3.bucket, s3.prefix) == (s3_url[5:].split("/")[0], "prefix")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    assert S3Store(s3_url).client.meta.region_name == DEFAULT_REGION
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert S3Store(s3_url).client.meta.region_name == "eu-west-1"
    with pytest.raises(ValueError):
        S3Store(s3_url, part_size=MIN_PART_SIZE - 1)


def test_botocore_does_not_retry_behind_our_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store = open_store("s3://bucket/p", retry=RetryPolicy(attempts=3, base_delay_s=0.0))
    with pytest.raises(RetriableStoreError):
        store.size("k")
    assert store.counters().HEAD == 3  # three attempts of ours, one HTTP request each


def test_prefix_is_invisible_to_callers(s3_url: str) -> None:
    import boto3

    store = open_store(s3_url)
    store.put("k", b"v")
    bucket = s3_url[5:].split("/")[0]
    raw = boto3.client("s3").list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in raw["Contents"]] == ["prefix/k"]
    assert [o.key for o in store.list()] == ["k"]


def _pending_uploads(s3_url: str) -> list[object]:
    import boto3

    bucket = s3_url[5:].split("/")[0]
    return list(boto3.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads", []))


def test_aborted_multipart_upload_on_the_server(s3_url: str,
                                                moto_server: RecordingMotoServer) -> None:
    store = open_store(s3_url)
    chunk = os.urandom(1 << 20)
    with pytest.raises(RuntimeError), store.put_stream("big") as w:
        for _ in range(17):  # past the single-PUT threshold: two parts go up
            w.write(chunk)
        raise RuntimeError("crash mid-upload")
    server = moto_server.counts()
    assert server == {"CreateMultipartUpload": 1, "UploadPart": 2, "AbortMultipartUpload": 1}
    client = {k: v for k, v in store.counters().as_dict().items()
              if v and not k.startswith("bytes")}
    assert client == server
    moto_server.clear_log()
    assert list(store.list()) == [] and _pending_uploads(s3_url) == []


def test_unfinished_uploads_listed_under_the_prefix_and_aborted(
        s3_url: str, moto_server: RecordingMotoServer) -> None:
    """Uploads a killed process left (under this store's prefix only) are listed with the
    time they began and aborted; client counts match the server's, by type."""
    import boto3

    bucket = s3_url[5:].split("/")[0]
    client = boto3.client("s3")
    before_ms = int(time.time() * 1000) - MTIME_SLACK_MS
    for key in ("prefix/a/killed", "prefix/b/killed", "elsewhere/killed"):
        client.create_multipart_upload(Bucket=bucket, Key=key)
    after_ms = int(time.time() * 1000) + MTIME_SLACK_MS
    moto_server.clear_log()
    store = open_store(s3_url)
    assert store.unfinished_uploads(before_ms) == []
    found = store.unfinished_uploads(after_ms)
    assert [u.key for u in found] == ["a/killed", "b/killed"]
    assert all(before_ms <= u.started_ms <= after_ms for u in found)
    store.abort_upload(found[0])
    with pytest.raises(FileNotFoundError):
        store.abort_upload(found[0])  # aborted already
    assert [u.key for u in store.unfinished_uploads(after_ms)] == ["b/killed"]
    server = moto_server.counts()
    assert server == {"ListMultipartUploads": 3, "AbortMultipartUpload": 2}
    client_counts = {k: v for k, v in store.counters().as_dict().items()
                     if v and not k.startswith("bytes")}
    assert client_counts == server
    assert (store.counters().writes) == 3  # ListMultipartUploads is billed as a LIST
    assert {u["Key"] for u in client.list_multipart_uploads(Bucket=bucket)["Uploads"]} == {
        "prefix/b/killed", "elsewhere/killed"}


def test_stale_upload_files_of_the_file_store(tmp_path: Path) -> None:
    """The file store's unfinished uploads are the temporary files of killed writers, by
    their modification time; memory:// keeps none."""
    store = open_store(f"file://{tmp_path}/objects")
    store.put("d/done", b"v")
    leftover = tmp_path / "objects" / "d" / ".upload-killed.abc123.tmp"
    leftover.write_bytes(b"half")
    os.utime(leftover, ns=(0, 10_000 * 1_000_000))
    assert store.unfinished_uploads(10_000) == []
    (upload,) = store.unfinished_uploads(10_001)
    assert (upload.key, upload.upload_id, upload.started_ms) == (
        "d/killed", leftover.name, 10_000)
    with pytest.raises(ValueError):
        store.abort_upload(dataclasses.replace(upload, key="d/done"))
    store.abort_upload(upload)
    assert not leftover.exists() and store.get("d/done") == b"v"
    with pytest.raises(FileNotFoundError):
        store.abort_upload(upload)
    assert store.counters().ListMultipartUploads == 2
    assert store.counters().AbortMultipartUpload == 2  # the refused one made no request
    memory = open_store(f"memory://uploads-{os.urandom(4).hex()}")
    assert memory.unfinished_uploads(2**62) == []


def test_failed_part_aborts_the_upload(s3_url: str, moto_server: RecordingMotoServer) -> None:
    s3 = S3Store(s3_url, multipart_threshold=MIN_PART_SIZE, part_size=MIN_PART_SIZE)
    real = s3.client.upload_part
    calls = []

    def flaky_upload_part(**kwargs: object) -> object:
        calls.append(kwargs["PartNumber"])
        if len(calls) == 2:
            raise client_error("SlowDown", 503, "UploadPart", "slow")
        return real(**kwargs)

    s3.client.upload_part = flaky_upload_part
    w = s3.put_stream("k")
    with pytest.raises(RetriableStoreError):
        for _ in range(3):
            w.write(b"z" * MIN_PART_SIZE)
    assert moto_server.counts()["AbortMultipartUpload"] == 1
    with pytest.raises(ValueError):
        w.write(b"z")
    assert list(s3.list()) == [] and _pending_uploads(s3_url) == []


def test_part_size_boundaries(s3_url: str, moto_server: RecordingMotoServer) -> None:
    s3 = S3Store(s3_url, part_size=MIN_PART_SIZE, multipart_threshold=MIN_PART_SIZE)
    data = os.urandom(2 * MIN_PART_SIZE)
    with s3.put_stream("exact") as w:
        w.write(data)  # exactly two parts: no empty third part
    assert moto_server.counts() == {"CreateMultipartUpload": 1, "UploadPart": 2,
                                    "CompleteMultipartUpload": 1}
    assert s3.get("exact") == data
    moto_server.clear_log()
    with s3.put_stream("under") as w:
        w.write(data[: MIN_PART_SIZE - 1])
    assert moto_server.counts() == {"PUT": 1}


def test_whole_object_get_sends_no_range(s3_url: str, moto_server: RecordingMotoServer) -> None:
    store = open_store(s3_url)
    store.put("k", b"abc")
    moto_server.clear_log()
    assert store.get("k") == b"abc"
    assert [(r.operation, r.range) for r in moto_server.requests] == [("GET", None)]


# ------------------------------------------------------------ policy, translation, server log


class FlakyStreams(Flaky):
    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        self.size(key)
        return io.BytesIO(b"data")


def test_stream_opening_is_retried() -> None:
    flaky = FlakyStreams(2, RetriableStoreError("reset"))
    store = RetryingStore(flaky, RetryPolicy(), sleep=lambda s: None)
    assert store.open_stream("k").read() == b"data" and flaky.calls == 3


def test_retry_delays() -> None:
    exact = RetryPolicy(attempts=5, base_delay_s=0.1, max_delay_s=0.5, jitter=0.0)
    assert [exact.delay(a) for a in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    full = RetryPolicy(base_delay_s=0.1, max_delay_s=0.5)
    assert all(0.0 <= full.delay(3) <= 0.4 for _ in range(100))
    slept: list[float] = []
    always = Flaky(99, RetriableStoreError("503"))
    store = RetryingStore(always, exact, sleep=slept.append)
    with pytest.raises(RetriableStoreError):
        store.size("k")
    assert slept == pytest.approx([0.1, 0.2, 0.4, 0.5])
    for bad in ({"attempts": 0}, {"jitter": 1.5}, {"base_delay_s": -1.0}):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)


@pytest.mark.parametrize("exc,expected,retriable", [
    (ReadTimeoutError(endpoint_url="http://x"), RetriableStoreError, True),
    (ConnectionClosedError(endpoint_url="http://x"), RetriableStoreError, True),
    (NoCredentialsError(), PermissionError, False),
    (ParamValidationError(report="bad"), ValueError, False),
    (client_error("Weird", 400, "GetObject"), ObjectStoreError, False),
])
def test_transport_errors(exc: Exception, expected: type[Exception], retriable: bool) -> None:
    out = translate(exc, "get k")
    assert isinstance(out, expected)
    assert getattr(out, "retriable", False) is retriable


@pytest.mark.parametrize("method,path,query,op", [
    ("GET", "/b/k", "", "GET"),
    ("GET", "/b/dir/k", "", "GET"),
    ("GET", "/b", "list-type=2&prefix=p", "LIST"),
    ("GET", "/b/", "list-type=2", "LIST"),
    ("GET", "/", "", "ListBuckets"),
    ("HEAD", "/b/k", "", "HEAD"),
    ("HEAD", "/b", "", "HeadBucket"),
    ("PUT", "/b/k", "", "PUT"),
    ("PUT", "/b/k", "partNumber=1&uploadId=u", "UploadPart"),
    ("PUT", "/b/k", "uploadId=u&partNumber=2", "UploadPart"),
    ("PUT", "/b", "", "CreateBucket"),
    ("POST", "/b/k", "uploads", "CreateMultipartUpload"),
    ("POST", "/b/k", "uploads=", "CreateMultipartUpload"),
    ("POST", "/b/k", "uploadId=u", "CompleteMultipartUpload"),
    ("POST", "/b", "delete", "DELETE"),
    ("POST", "/b/", "delete=", "DELETE"),
    ("DELETE", "/b/k", "uploadId=u", "AbortMultipartUpload"),
    ("GET", "/b", "uploads", "ListMultipartUploads"),
    ("GET", "/b/", "prefix=p&uploads=", "ListMultipartUploads"),
    ("DELETE", "/b/k", "", "DELETE"),
    ("DELETE", "/b", "", "DeleteBucket"),
])
def test_served_request_operation(method: str, path: str, query: str, op: str) -> None:
    assert ServedRequest(method, path, query, None).operation == op


def test_each_list_page_is_one_request(s3_url: str, moto_server: RecordingMotoServer) -> None:
    s3 = S3Store(s3_url)
    store = CountingStore(RetryingStore(s3))  # what open_store builds
    for i in range(5):
        store.put(f"k{i}", b"v")
    real = s3.client.list_objects_v2
    s3.client.list_objects_v2 = lambda **kw: real(MaxKeys=2, **kw)
    moto_server.clear_log()
    before = store.counters()
    assert [o.key for o in store.list()] == [f"k{i}" for i in range(5)]
    assert moto_server.counts() == {"LIST": 3}
    assert (store.counters() - before).LIST == 3


def test_list_reports_modification_times(store: ObjectStore) -> None:
    """Listings carry when each object was written, by the store's clock (what `silt doctor`
    ages orphans by); memory:// keeps none."""
    import time

    before = time.time_ns() // 1_000_000
    store.put("t/1", b"x")
    (info,) = store.list("t/")
    if isinstance(store, StoreWrapper) and store.url.startswith("memory://"):
        assert info.modified_ms is None
        return
    assert info.modified_ms is not None
    # S3's LastModified has whole seconds; moto runs on this machine's clock.
    assert before - 1000 <= info.modified_ms <= time.time_ns() // 1_000_000 + 1000
