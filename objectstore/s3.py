"""S3 through boto3: AWS, MinIO, LocalStack and moto with no code change.

The client honours the standard AWS variables (`AWS_ENDPOINT_URL`, credentials, region).
Endpoint, region and addressing style are resolved into `S3Options`, plain data another
process can be handed (a Spark executor opens the store the driver resolved, whatever its
own environment); credentials never are: each process takes them from its AWS chain.
botocore's own retries are off (one attempt): the RetryingStore policy is the only one, so
request counts are truthful; it also runs each request of a streamed upload (the store's
request runner: the PUT, each part, the completion, the abort). Every HTTP request
botocore sends is reported to the store's listener from botocore's `before-send` event, so
multipart parts and list pages count one by one; one that fails (an error status, or no
response) is reported to the failure listener from the `needs-retry` event botocore emits
after each attempt, classified by the one translation table.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    ParamValidationError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from .base import (
    ABORT_MULTIPART,
    COMPLETE_MULTIPART,
    CREATE_MULTIPART,
    DELETE,
    GET,
    HEAD,
    LIST,
    LIST_MULTIPART,
    PUT,
    UPLOAD_PART,
    Backend,
    ObjectInfo,
    ObjectWriter,
    ReadStream,
    RequestListener,
    StreamBase,
    UnfinishedUpload,
    WriterBase,
)
from .errors import (
    BucketNotFoundError,
    InvalidRangeError,
    ObjectStoreError,
    RetriableStoreError,
    ThrottledError,
    UnsupportedUrlError,
)

ENV_ENDPOINT = "AWS_ENDPOINT_URL"
ENV_ENDPOINT_S3 = "AWS_ENDPOINT_URL_S3"  # botocore's service-specific name, checked first
ENV_REGION = "AWS_REGION"
ENV_DEFAULT_REGION = "AWS_DEFAULT_REGION"
DEFAULT_REGION = "us-east-1"
AddressingStyle = Literal["auto", "path", "virtual"]
ADDRESSING_STYLES: tuple[str, ...] = get_args(AddressingStyle)
MIN_PART_SIZE = 5 * 1024 * 1024
DEFAULT_PART_SIZE = 8 * 1024 * 1024
# Objects up to this size go up as one PUT (an agent flush of ~8 MiB must not pay for a
# 3-request multipart upload); larger ones stream as multipart in DEFAULT_PART_SIZE parts.
DEFAULT_MULTIPART_THRESHOLD = 16 * 1024 * 1024
DELETE_BATCH = 1000

# botocore operation -> billed request type.
OPERATIONS = {
    "PutObject": PUT,
    "CreateMultipartUpload": CREATE_MULTIPART,
    "UploadPart": UPLOAD_PART,
    "CompleteMultipartUpload": COMPLETE_MULTIPART,
    "AbortMultipartUpload": ABORT_MULTIPART,
    "GetObject": GET,
    "HeadObject": HEAD,
    "ListObjectsV2": LIST,
    "ListMultipartUploads": LIST_MULTIPART,
    "DeleteObjects": DELETE,
    "DeleteObject": DELETE,
}

# S3 error code (or HTTP status) -> exception class. The one translation table.
ERROR_TABLE: dict[str, type[Exception]] = {
    "NoSuchKey": FileNotFoundError,
    "NoSuchBucket": BucketNotFoundError,
    "NoSuchUpload": FileNotFoundError,
    "NotFound": FileNotFoundError,
    "404": FileNotFoundError,
    "AccessDenied": PermissionError,
    "InvalidAccessKeyId": PermissionError,
    "SignatureDoesNotMatch": PermissionError,
    "403": PermissionError,
    "PreconditionFailed": FileExistsError,
    "BucketAlreadyOwnedByYou": FileExistsError,
    "412": FileExistsError,
    "InvalidRange": InvalidRangeError,
    "416": InvalidRangeError,
    "429": ThrottledError,  # not S3's (it says 503 SlowDown); other HTTP stores' throttle
    "SlowDown": ThrottledError,
    "Throttling": ThrottledError,
    "RequestTimeout": RetriableStoreError,
    "InternalError": RetriableStoreError,
    "ServiceUnavailable": ThrottledError,
    "500": RetriableStoreError,
    "502": RetriableStoreError,
    "503": ThrottledError,  # S3 answers 503 when it wants fewer requests
    "504": RetriableStoreError,
}

# botocore's client-side errors -> exception class, first match wins. Transport failures
# (connect/read timeouts, resets, truncated bodies) are retriable; the rest are not.
TRANSPORT_TABLE: tuple[tuple[type[BotoCoreError], type[Exception]], ...] = (
    (BotoConnectionError, RetriableStoreError),  # EndpointConnectionError, ConnectTimeout
    (HTTPClientError, RetriableStoreError),  # ReadTimeout, ConnectionClosed, streaming
    (IncompleteReadError, RetriableStoreError),
    (NoCredentialsError, PermissionError),  # with the hint NO_CREDENTIALS
    (ParamValidationError, ValueError),
)

# Where credentials come from, told to a process that has none (a Spark executor has its
# worker's environment, not the driver's).
NO_CREDENTIALS = ("the standard AWS chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,"
                  " AWS_PROFILE, ~/.aws, an instance or pod role; Spark executors: their"
                  " worker's chain or spark.executorEnv.*")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class S3Options:
    """Where and how the client reaches S3, as data: resolved once (`from_environment`) and
    passed as is to other processes so all of them open the same store. No credentials."""

    endpoint_url: str | None = None  # None: AWS's own endpoint for the region
    region: str = DEFAULT_REGION
    addressing_style: AddressingStyle = "auto"  # "path" for MinIO, LocalStack, moto

    def __post_init__(self) -> None:
        if self.addressing_style not in ADDRESSING_STYLES:
            raise ValueError(f"S3 addressing style {self.addressing_style!r}: must be one of"
                             f" {', '.join(ADDRESSING_STYLES)}")

    @classmethod
    def from_environment(cls, env: Mapping[str, str] = os.environ) -> S3Options:
        """The options the standard AWS variables give: `AWS_ENDPOINT_URL_S3` or
        `AWS_ENDPOINT_URL` (path-style addressing then), `AWS_REGION` or
        `AWS_DEFAULT_REGION` (else us-east-1)."""
        endpoint = env.get(ENV_ENDPOINT_S3) or env.get(ENV_ENDPOINT) or None
        region = env.get(ENV_REGION) or env.get(ENV_DEFAULT_REGION) or DEFAULT_REGION
        return cls(endpoint, region, "path" if endpoint else "auto")


def translate(exc: Exception, what: str) -> Exception:
    """Map a botocore error to the store's contract (see objectstore.base) by the tables."""
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        cls = ERROR_TABLE.get(code) or ERROR_TABLE.get(status) or ObjectStoreError
        message = f"{what}: {code or status} {err.get('Message', '')}".strip()
        if code == "NoSuchBucket":
            message = f"{what}: bucket does not exist ({err.get('BucketName', '')})"
        return cls(message)
    if isinstance(exc, BotoCoreError):
        for kind, target in TRANSPORT_TABLE:
            if isinstance(exc, kind):
                hint = f" ({NO_CREDENTIALS})" if isinstance(exc, NoCredentialsError) else ""
                return target(f"{what}: {exc}{hint}")
        return ObjectStoreError(f"{what}: {exc}")
    return exc


def client_options(endpoint: str | None,
                   addressing_style: AddressingStyle | None = None) -> dict[str, Any]:
    """botocore Config options every S3 client of ours gets: one attempt per request (the
    RetryingStore is the one retry policy) and the addressing style, by default path-style
    on a custom endpoint."""
    style = addressing_style or ("path" if endpoint else "auto")
    return {
        # total_max_attempts, not max_attempts: botocore reads max_attempts=1 as "one
        # retry" (total 2), which would hide requests from the counts.
        "retries": {"total_max_attempts": 1, "mode": "standard"},
        "s3": {"addressing_style": style},
    }


def billed_request(request: Any, event_name: str) -> tuple[str, int] | None:
    """(request type, bytes sent) of a request about to go out, from botocore's
    `before-send` event (also aiobotocore's, for s3fs); None for requests S3 does not bill
    as object requests."""
    op = OPERATIONS.get(event_name.rsplit(".", 1)[-1])
    if op is None:
        return None
    body = request.body
    return op, len(body) if isinstance(body, bytes | bytearray) else 0


def range_header(start: int, end: int | None) -> dict[str, str]:
    """GetObject's Range argument for bytes [start, end): none for a whole object (S3
    answers 416 to `bytes=0-` on an empty one)."""
    if not start and end is None:
        return {}
    return {"Range": f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"}


def _call(what: str, fn: Callable[..., T], **kwargs: Any) -> T:
    try:
        return fn(**kwargs)
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, what) from exc


class _S3Stream(StreamBase):
    """The body of one ranged GetObject, read incrementally."""

    def __init__(self, body: Any, what: str, length: int, report: RequestListener) -> None:
        self._body = body
        self._what = what
        self._left = length
        self._report = report

    def read(self, n: int = -1, /) -> bytes:
        if self._body is None:
            return b""
        if n < 0 or n > self._left:
            n = self._left
        chunks = []
        want = n
        try:
            while want > 0:
                piece = self._body.read(want)
                if not piece:
                    break
                chunks.append(piece)
                want -= len(piece)
        except BotoCoreError as exc:
            raise translate(exc, f"{self._what}: stream broke") from exc
        except OSError as exc:  # a reset socket surfacing from below botocore
            raise RetriableStoreError(f"{self._what}: stream broke: {exc}") from exc
        data = b"".join(chunks)
        self._left -= len(data)
        self._report("", 0, len(data))  # bytes received; not a request
        return data

    def close(self) -> None:
        if self._body is not None:
            self._body.close()


class _S3Writer(WriterBase):
    """One PutObject if the object stays under the multipart threshold, else a streaming
    multipart upload; memory is bounded by the threshold."""

    def __init__(self, store: S3Store, key: str, part_size: int) -> None:
        self._key = store._key(key)
        super().__init__(repr(self._key))
        self._s = store
        self._part_size = part_size
        self._buf = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    def _write(self, data: bytes) -> None:
        self._buf += data
        if self._upload_id is None and len(self._buf) < self._s.multipart_threshold:
            return
        try:
            while len(self._buf) >= self._part_size:
                part = bytes(self._buf[: self._part_size])
                del self._buf[: self._part_size]
                self._upload_part(part)
        except BaseException:
            self.abort()  # a part is lost (its retries ran out): the upload cannot complete
            raise

    def _request(self, fn: Callable[..., T], **kwargs: Any) -> T:
        """One request of this upload, run by the store's request runner (the retry
        policy of a RetryingStore around it)."""
        what = f"upload s3://{self._s.bucket}/{self._key}"
        return self._s._run_request(lambda: _call(what, fn, **kwargs))

    def _upload_part(self, part: bytes) -> None:
        c = self._s.client
        if self._upload_id is None:
            resp = self._request(c.create_multipart_upload, Bucket=self._s.bucket, Key=self._key)
            self._upload_id = str(resp["UploadId"])
        number = len(self._parts) + 1
        resp = self._request(c.upload_part, Bucket=self._s.bucket, Key=self._key,
                             UploadId=self._upload_id, PartNumber=number, Body=part)
        self._parts.append({"ETag": resp["ETag"], "PartNumber": number})

    def _complete(self) -> None:
        """CompleteMultipartUpload, safe to repeat: a retry told NoSuchUpload after an
        attempt whose answer was lost is a success if the object is there, whole."""
        c = self._s.client
        tried = False

        def complete() -> None:
            nonlocal tried
            first, tried = not tried, True
            try:
                _call(f"upload s3://{self._s.bucket}/{self._key}", c.complete_multipart_upload,
                      Bucket=self._s.bucket, Key=self._key, UploadId=self._upload_id,
                      MultipartUpload={"Parts": self._parts})
            except FileNotFoundError:
                if first or self._stored_size() != self._n:
                    raise

        self._s._run_request(complete)

    def _stored_size(self) -> int | None:
        """The size of the object under this upload's key (one HEAD), None if none."""
        try:
            resp = _call(f"head s3://{self._s.bucket}/{self._key}", self._s.client.head_object,
                         Bucket=self._s.bucket, Key=self._key)
        except FileNotFoundError:
            return None
        return int(resp["ContentLength"])

    def _commit(self) -> None:
        if self._upload_id is None:
            self._request(self._s.client.put_object, Bucket=self._s.bucket, Key=self._key,
                          Body=bytes(self._buf))
        else:
            if self._buf:
                self._upload_part(bytes(self._buf))
            self._complete()
        self._buf = bytearray()

    def _discard(self) -> None:
        self._buf = bytearray()
        if self._upload_id is not None:
            # If this fails, GC aborts the unfinished upload later (`unfinished_uploads`); a
            # repeated abort whose first answer was lost is told NoSuchUpload: done too.
            with contextlib.suppress(ObjectStoreError, OSError, ValueError):
                self._request(self._s.client.abort_multipart_upload, Bucket=self._s.bucket,
                              Key=self._key, UploadId=self._upload_id)


class S3Store(Backend):
    """`s3://bucket/prefix`: every key lives under the prefix.

    `options`: endpoint, region and addressing style (default: from this process's AWS
    variables, `S3Options.from_environment`).
    """

    def __init__(self, url: str, *, options: S3Options | None = None,
                 part_size: int = DEFAULT_PART_SIZE,
                 multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD,
                 client: Any = None) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise UnsupportedUrlError(f"not an s3://bucket/prefix URL: {url!r}")
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part size {part_size} below S3's minimum of {MIN_PART_SIZE}")
        super().__init__(url)
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.part_size = part_size
        self.multipart_threshold = max(multipart_threshold, part_size)
        self.options = options or S3Options.from_environment()
        if client is None:
            config = Config(**client_options(self.options.endpoint_url,
                                             self.options.addressing_style),
                            max_pool_connections=32)
            client = boto3.session.Session().client(
                "s3", endpoint_url=self.options.endpoint_url, region_name=self.options.region,
                config=config)
        self.client = client
        client.meta.events.register("before-send.s3", self._before_send)
        client.meta.events.register("needs-retry.s3", self._after_send)

    def _before_send(self, request: Any, event_name: str = "", **_: Any) -> None:
        billed = billed_request(request, event_name)
        if billed is not None:
            self._report(*billed, 0)

    def _after_send(self, response: Any, caught_exception: Exception | None,
                    event_name: str = "", **_: Any) -> None:
        """After each attempt: a failed request goes to the failure listener (returns None:
        botocore's own retry decision, none here, is left alone)."""
        op = OPERATIONS.get(event_name.rsplit(".", 1)[-1])
        if op is None:
            return
        if caught_exception is not None:
            error = translate(caught_exception, "")
        elif response is not None and response[0].status_code >= 300:
            error = translate(ClientError(response[1], op), "")
        else:
            return
        self._report_failure(op, type(error).__name__)

    def _key(self, key: str) -> str:
        if not key:
            raise ValueError("empty object key")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _what(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def create_bucket(self) -> bool:
        """Create the bucket in the client's region (`silt init --create-bucket`); False
        if it exists and is ours already (asked first: us-east-1 answers a repeated create
        with success)."""
        try:
            _call(f"head bucket s3://{self.bucket}", self.client.head_bucket, Bucket=self.bucket)
            return False
        except FileNotFoundError:
            pass
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if self.options.region != DEFAULT_REGION:  # S3: us-east-1 takes no constraint
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.options.region}
        try:
            _call(f"create bucket s3://{self.bucket}", self.client.create_bucket, **kwargs)
        except FileExistsError:
            return False
        return True

    def put(self, key: str, data: bytes) -> None:
        _call(f"put {self._what(key)}", self.client.put_object, Bucket=self.bucket,
              Key=self._key(key), Body=data)

    def put_stream(self, key: str) -> ObjectWriter:
        return _S3Writer(self, key, self.part_size)

    def open_stream(self, key: str, start: int = 0, end: int | None = None) -> ReadStream:
        what = f"get {self._what(key)}"
        if (end is not None and end < start) or start < 0:
            raise InvalidRangeError(f"{what}: bad range [{start}, {end})")
        if end == start:
            return _S3Stream(None, what, 0, self._report)
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(key),
                                  **range_header(start, end)}
        resp = _call(what, self.client.get_object, **kwargs)
        length = int(resp.get("ContentLength", 0))
        if end is not None and length != end - start:
            resp["Body"].close()
            raise InvalidRangeError(f"{what}: asked for {end - start} bytes, object has {length}")
        return _S3Stream(resp["Body"], what, length, self._report)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self.open_stream(key, start, end) as s:
            return s.read()

    def size(self, key: str) -> int:
        resp = _call(f"head {self._what(key)}", self.client.head_object, Bucket=self.bucket,
                     Key=self._key(key))
        return int(resp["ContentLength"])

    def delete_many(self, keys: Iterable[str]) -> None:
        batch = [{"Key": self._key(k)} for k in keys]
        for i in range(0, len(batch), DELETE_BATCH):
            resp = _call(f"delete in s3://{self.bucket}", self.client.delete_objects,
                         Bucket=self.bucket,
                         Delete={"Objects": batch[i : i + DELETE_BATCH], "Quiet": True})
            errors = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                e = errors[0]
                cls = ERROR_TABLE.get(str(e.get("Code")), ObjectStoreError)
                raise cls(f"delete s3://{self.bucket}/{e.get('Key')}: {e.get('Code')}"
                          f" {e.get('Message', '')}")

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full = self._key(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        strip = len(self.prefix) + 1 if self.prefix else 0
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full}
            if token:
                kwargs["ContinuationToken"] = token
            resp = _call(f"list s3://{self.bucket}/{full}", self.client.list_objects_v2, **kwargs)
            for obj in resp.get("Contents", []):
                modified = obj.get("LastModified")
                yield ObjectInfo(str(obj["Key"])[strip:], int(obj["Size"]),
                                 None if modified is None
                                 else int(modified.timestamp() * 1000))
            if not resp.get("IsTruncated"):
                return
            token = str(resp["NextContinuationToken"])

    def unfinished_uploads(self, started_before_ms: int) -> Sequence[UnfinishedUpload]:
        full = f"{self.prefix}/" if self.prefix else ""
        strip = len(full)
        found: list[UnfinishedUpload] = []
        markers: dict[str, str] = {}
        while True:
            resp = _call(f"list uploads s3://{self.bucket}/{full}",
                         self.client.list_multipart_uploads, Bucket=self.bucket, Prefix=full,
                         **markers)
            for up in resp.get("Uploads", []):
                started = int(up["Initiated"].timestamp() * 1000)
                if started < started_before_ms:
                    found.append(UnfinishedUpload(str(up["Key"])[strip:], str(up["UploadId"]),
                                                  started))
            if not resp.get("IsTruncated"):
                return found
            markers = {"KeyMarker": str(resp["NextKeyMarker"]),
                       "UploadIdMarker": str(resp["NextUploadIdMarker"])}

    def abort_upload(self, upload: UnfinishedUpload) -> None:
        _call(f"abort upload {upload.upload_id} of {self._what(upload.key)}",
              self.client.abort_multipart_upload, Bucket=self.bucket,
              Key=self._key(upload.key), UploadId=upload.upload_id)
