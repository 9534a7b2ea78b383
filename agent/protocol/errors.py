"""Errors of the protocol server, and the error codes failures inside handlers answer with."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from kio.schema.errors import ErrorCode

from metadata.errors import MetadataError
from objectstore.errors import ObjectStoreError

log = logging.getLogger(__name__)


class ProtocolError(Exception):
    """A connection sent bytes that are not a request this server accepts (garbage, a
    truncated or oversize frame, an unknown API key or version): that connection is closed.
    `reason`: the label it is counted under (telemetry.REFUSAL_REASONS)."""

    def __init__(self, message: str, reason: str = "malformed_request") -> None:
        super().__init__(message)
        self.reason = reason


# Failures of the stores a handler reports in one line (anything else may be a bug: logged
# with its traceback): the metadata store's, its database driver's, the object store's.
STORE_FAILURES = (MetadataError, sa.exc.SQLAlchemyError, ObjectStoreError, OSError)


def log_failure(what: str, exc: Exception) -> None:
    """Log a failure that a handler answers with an error code."""
    if isinstance(exc, STORE_FAILURES):
        log.warning("%s failed: %s: %s", what, type(exc).__name__, exc)
    else:
        log.warning("%s failed", what, exc_info=exc)


def change_failed(what: str, exc: Exception) -> tuple[ErrorCode, str]:
    """(error code, message) of an admin change on one resource that the metadata store did
    not make: REQUEST_TIMED_OUT when it was definitely not applied and may be retried
    (CommitConflictError: the admin client retries), else UNKNOWN_SERVER_ERROR (a commit
    whose outcome is unknown, the database unreachable, a bug)."""
    log_failure(what, exc)
    if isinstance(exc, MetadataError) and exc.retriable:
        return ErrorCode.request_timed_out, str(exc)
    return ErrorCode.unknown_server_error, str(exc) or type(exc).__name__
