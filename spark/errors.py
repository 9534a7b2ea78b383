"""Errors of the Spark integration."""

from __future__ import annotations

import re

# The line that ends a Python traceback: `package.Name: message` (or a bare name).
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b(: .*)?$")
TRACEBACK = "Traceback (most recent call last):"


class SparkJobError(RuntimeError):
    """Spark gave up on a job: a task raised on every attempt (the message: its error)."""

    retriable = False


def first_error(exc: BaseException) -> str:
    """One line for a failed Spark job: the exception line ending the first Python traceback
    in the error's text (pyspark wraps a task's error in the JVM's stack trace), else the
    text's first line."""
    lines = str(exc).splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if TRACEBACK in line)
    except StopIteration:
        start = len(lines)
    for line in lines[start + 1:]:
        if _EXCEPTION_LINE.match(line.strip()) and not line.startswith((" ", "\t")):
            return line.strip()
    first = next((line.strip() for line in lines if line.strip()), "")
    return first or type(exc).__name__


class DataLossError(RuntimeError):
    """Records a read needed are gone (retention, DeleteRecords, a deleted topic or
    partition) and `failOnDataLoss` is true, as Spark's Kafka source fails then."""

    retriable = False
