"""One behaviour suite over memory://, file:// and a real moto S3 server, plus the
server-side proof of the request-count claims."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from objectstore import (
    InvalidRangeError,
    ObjectStore,
    RetriableStoreError,
    RetryingStore,
    RetryPolicy,
    open_store,
)
from objectstore.s3 import translate
from objectstore.testserver import RecordingMotoServer


@pytest.fixture(params=["memory", "file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "memory":
        yield open_store(f"memory://suite-{os.urandom(4).hex()}")
    elif request.param == "file":
        yield open_store(f"file://{tmp_path}/objects")
    else:
        yield open_store(request.getfixturevalue("s3_url"))


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


class Flaky:
    """A stand-in store whose `size` fails `failures` times with `error`."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.calls = 0
        self.failures = failures
        self.error = error
        self.url = "flaky://"

    def size(self, key: str) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return 42

    def set_request_listener(self, listener: object) -> None:
        pass


def test_retry_policy_retries_only_retriable_errors() -> None:
    flaky = Flaky(2, RetriableStoreError("SlowDown"))
    store = RetryingStore(flaky, RetryPolicy(attempts=5), sleep=lambda s: None)  # type: ignore[arg-type]
    assert store.size("k") == 42 and flaky.calls == 3
    fatal = Flaky(2, PermissionError("AccessDenied"))
    store = RetryingStore(fatal, RetryPolicy(attempts=5), sleep=lambda s: None)  # type: ignore[arg-type]
    with pytest.raises(PermissionError):
        store.size("k")
    assert fatal.calls == 1
    always = Flaky(99, RetriableStoreError("503"))
    store = RetryingStore(always, RetryPolicy(attempts=3), sleep=lambda s: None)  # type: ignore[arg-type]
    with pytest.raises(RetriableStoreError):
        store.size("k")
    assert always.calls == 3


@pytest.mark.parametrize("code,status,expected", [
    ("NoSuchKey", 404, FileNotFoundError),
    ("NoSuchBucket", 404, FileNotFoundError),
    ("AccessDenied", 403, PermissionError),
    ("PreconditionFailed", 412, FileExistsError),
    ("InvalidRange", 416, InvalidRangeError),
    ("SlowDown", 503, RetriableStoreError),
    ("InternalError", 500, RetriableStoreError),
    ("", 503, RetriableStoreError),
])
def test_error_table(code: str, status: int, expected: type[Exception]) -> None:
    err = ClientError({"Error": {"Code": code, "Message": "m"},
                       "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")
    assert isinstance(translate(err, "get k"), expected)
    conn = translate(EndpointConnectionError(endpoint_url="http://x"), "get k")
    assert isinstance(conn, RetriableStoreError) and conn.retriable
