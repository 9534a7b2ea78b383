"""Every S3 request type survives injected faults through the one retry policy (a fault-
injecting proxy in front of the moto server), and giving up is one line."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from faults.proxy import DROP_AFTER, ERROR500, FAILING, RESET, SLOWDOWN, FaultProxy
from objectstore import (
    ObjectStore,
    RetriableStoreError,
    RetryingStore,
    RetryPolicy,
    S3Store,
    ThrottledError,
)
from objectstore.s3 import MIN_PART_SIZE
from objectstore.testserver import RecordingMotoServer

FAST = RetryPolicy(attempts=4, base_delay_s=0.001, max_delay_s=0.01, throttle_delay_s=0.002)


def retrying(s3_url: str, policy: RetryPolicy = FAST) -> RetryingStore:
    """A retrying S3 store on `s3_url` (through the proxy) with 5 MiB multipart parts."""
    backend = S3Store(s3_url, part_size=MIN_PART_SIZE, multipart_threshold=MIN_PART_SIZE)
    return RetryingStore(backend, policy)


def uploads_left(s3_url: str, moto_server: RecordingMotoServer) -> list[str]:
    """Keys of multipart uploads neither completed nor aborted (asked of moto directly)."""
    bucket = s3_url.removeprefix("s3://").split("/", 1)[0]
    client = boto3.client("s3", endpoint_url=moto_server.endpoint_url)
    return [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


@pytest.mark.parametrize("fault", FAILING)
def test_each_request_type_survives_each_fault(s3_url: str, fault_proxy: FaultProxy,
                                               fault: str) -> None:
    store = retrying(s3_url)

    def faulted() -> None:
        """The next two requests fail with `fault`, the third goes through."""
        fault_proxy.inject(fault, fault)

    faulted()
    store.put("a", b"alpha")  # PUT (drop_after: applied twice, same bytes)
    faulted()
    with store.put_stream("b") as w:  # a streamed upload under the threshold: one PUT
        w.write(b"beta")
    faulted()
    assert store.get("a") == b"alpha"  # GET
    faulted()
    assert store.get_range("b", 1, 3) == b"et"  # ranged GET
    faulted()
    assert store.size("b") == 4  # HEAD
    faulted()
    assert [o.key for o in store.list()] == ["a", "b"]  # LIST
    faulted()
    store.delete_many(["a", "missing"])  # DeleteObjects (drop_after: deleted twice)
    assert [o.key for o in store.list()] == ["b"]
    counts = fault_proxy.counts()
    assert counts.injected == {fault: 14}
    assert counts.retried == 14 == store.retries
    assert store.throttled == (14 if fault == SLOWDOWN else 0)


def test_multipart_upload_survives_a_fault_at_every_step(
        s3_url: str, fault_proxy: FaultProxy, moto_server: RecordingMotoServer) -> None:
    store = retrying(s3_url)
    data = bytes(range(256)) * (14 * 1024 * 1024 // 256)  # parts of 5, 5 and 4 MiB
    fault_proxy.inject(
        RESET, None,  # CreateMultipartUpload: reset before the server saw it, then again
        SLOWDOWN, None,  # part 1
        DROP_AFTER, ERROR500, None,  # part 2: applied but unanswered, then a 500
        None,  # part 3
        DROP_AFTER, None,  # Complete: applied, unanswered; the retry (moto answers it 200)
    )
    with store.put_stream("big") as w:
        for i in range(0, len(data), 1024 * 1024):
            w.write(data[i:i + 1024 * 1024])
    assert store.get("big") == data
    assert fault_proxy.counts().injected == {RESET: 1, SLOWDOWN: 1, DROP_AFTER: 2, ERROR500: 1}
    assert store.retries == 5
    assert uploads_left(s3_url, moto_server) == []


def test_a_lost_create_answer_leaves_only_an_invisible_upload(
        s3_url: str, fault_proxy: FaultProxy, moto_server: RecordingMotoServer) -> None:
    """CreateMultipartUpload applied but unanswered: the retry makes a second upload; the
    first stays unfinished (invisible) until GC lists and aborts it, both retried."""
    store = retrying(s3_url)
    fault_proxy.inject(DROP_AFTER)
    with store.put_stream("big") as w:
        w.write(b"x" * (MIN_PART_SIZE + 1))
    assert store.size("big") == MIN_PART_SIZE + 1
    assert [o.key for o in store.list()] == ["big"]
    assert len(uploads_left(s3_url, moto_server)) == 1
    fault_proxy.inject(RESET)
    (left,) = store.unfinished_uploads(2**62)
    assert left.key == "big"
    fault_proxy.inject(SLOWDOWN)
    store.abort_upload(left)
    assert store.retries == 3
    assert uploads_left(s3_url, moto_server) == []
    assert store.get("big") == b"x" * (MIN_PART_SIZE + 1)  # the completed one is untouched


def test_giving_up_is_one_line_and_names_the_attempts(s3_url: str,
                                                      fault_proxy: FaultProxy) -> None:
    store = retrying(s3_url, RetryPolicy(attempts=3, base_delay_s=0.001,
                                         throttle_delay_s=0.001))
    fault_proxy.configure(rate=1.0, faults=(SLOWDOWN,))
    with pytest.raises(ThrottledError) as info:
        store.put("k", b"v")
    message = str(info.value)
    assert "\n" not in message and "SlowDown" in message
    assert message.endswith("(gave up after 3 attempts)")
    fault_proxy.configure(faults=(RESET,))
    with pytest.raises(RetriableStoreError) as reset:
        store.size("k")
    assert "\n" not in str(reset.value) and "gave up after 3 attempts" in str(reset.value)
    assert store.retries == 4


def test_a_multipart_upload_that_gives_up_is_aborted(
        s3_url: str, fault_proxy: FaultProxy, moto_server: RecordingMotoServer) -> None:
    store: ObjectStore = retrying(s3_url)
    fault_proxy.inject(None, None, ERROR500, ERROR500, ERROR500, ERROR500)  # part 2: 4 tries
    w = store.put_stream("big")
    w.write(b"x" * MIN_PART_SIZE)  # create + part 1
    with pytest.raises(RetriableStoreError, match="gave up after 4 attempts"):
        w.write(b"y" * MIN_PART_SIZE)  # part 2 fails every attempt: the upload is aborted
    with pytest.raises(ValueError):
        w.write(b"z")
    assert list(store.list()) == []
    assert uploads_left(s3_url, moto_server) == []


def test_throttled_retries_back_off_longer() -> None:
    policy = RetryPolicy(base_delay_s=0.01, max_delay_s=0.1, throttle_delay_s=0.5, jitter=1.0)
    assert all(0.25 <= policy.delay(1, throttled=True) <= 0.5 for _ in range(100))
    assert all(0.25 <= policy.delay(3, throttled=True) <= 0.5 for _ in range(100))  # capped
    assert all(policy.delay(1) <= 0.01 for _ in range(100))


@pytest.mark.parametrize("stored,completes", [(MIN_PART_SIZE + 3, True),
                                              (MIN_PART_SIZE, False), (None, False)])
def test_a_completion_repeated_after_a_lost_answer(stored: int | None,
                                                   completes: bool) -> None:
    """S3 may answer a repeated CompleteMultipartUpload NoSuchUpload when the first one
    was applied: the upload is done if its object is there, whole (one HEAD)."""
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="k",
                          aws_secret_access_key="s")
    store = RetryingStore(S3Store("s3://bucket/p", part_size=MIN_PART_SIZE,
                                  multipart_threshold=MIN_PART_SIZE, client=client), FAST)
    with Stubber(client) as stub:
        stub.add_response("create_multipart_upload", {"UploadId": "u"})
        stub.add_response("upload_part", {"ETag": '"1"'})
        stub.add_response("upload_part", {"ETag": '"2"'})
        stub.add_client_error("complete_multipart_upload", "InternalError", "", 500)
        stub.add_client_error("complete_multipart_upload", "NoSuchUpload", "", 404)
        if stored is None:
            stub.add_client_error("head_object", "404", "", 404)
        else:
            stub.add_response("head_object", {"ContentLength": stored})
        if not completes:
            stub.add_response("abort_multipart_upload", {})
        w = store.put_stream("k")
        w.write(b"x" * (MIN_PART_SIZE + 3))
        if completes:
            w.close()
        else:
            with pytest.raises(FileNotFoundError, match="NoSuchUpload"):
                w.close()
        stub.assert_no_pending_responses()
    assert store.retries == 1
