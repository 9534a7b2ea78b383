"""Request prices: what a request costs in each price class, per object store."""

from __future__ import annotations

from collections.abc import Mapping

# Dollars per request. S3 bills PUT/COPY/POST/LIST in one class and GET/SELECT/HEAD in
# another; DELETE is free.
PRICE_TABLES: dict[str, dict[str, float]] = {
    "s3-standard": {"write": 0.005 / 1000, "read": 0.0004 / 1000},
    "s3-express": {"write": 0.00113 / 1000, "read": 0.00003 / 1000},
    "gcs-standard": {"write": 0.005 / 1000, "read": 0.0004 / 1000},
    "r2": {"write": 0.0045 / 1000, "read": 0.00036 / 1000},
}
WRITE_CLASS = ("PUT", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "LIST",
               "ListMultipartUploads")
READ_CLASS = ("GET", "HEAD")


def request_dollars(counts: Mapping[str, int], prices: Mapping[str, float]) -> float:
    """Dollars for these request counts under a price table."""
    return writes(counts) * prices["write"] + reads(counts) * prices["read"]


def writes(counts: Mapping[str, int]) -> int:
    """Requests of the write (PUT) price class."""
    return sum(counts.get(k, 0) for k in WRITE_CLASS)


def reads(counts: Mapping[str, int]) -> int:
    """Requests of the read (GET) price class."""
    return sum(counts.get(k, 0) for k in READ_CLASS)
