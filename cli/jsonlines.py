"""The JSON-lines record formats of `silt produce` (input) and `silt consume` (output)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from agent import ConsumedRecord

PRODUCE_FIELDS = frozenset({"partition", "key", "value", "key_b64", "value_b64", "headers"})


class LineError(ValueError):
    """A produce input line is malformed; the message says why."""


@dataclass(frozen=True, slots=True)
class ProduceLine:
    """One parsed input record."""

    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _bytes_field(obj: dict[str, Any], name: str) -> bytes | None:
    text, b64 = obj.get(name), obj.get(f"{name}_b64")
    if name in obj and f"{name}_b64" in obj:
        raise LineError(f"give {name!r} or {name + '_b64'!r}, not both")
    if f"{name}_b64" in obj:
        if b64 is None:
            return None
        if not isinstance(b64, str):
            raise LineError(f"{name}_b64 must be a base64 string or null")
        try:
            return base64.b64decode(b64, validate=True)
        except binascii.Error as exc:
            raise LineError(f"{name}_b64 is not valid base64: {exc}") from None
    if text is None:
        return None
    if not isinstance(text, str):
        raise LineError(f"{name} must be a string or null, got {type(text).__name__}")
    return text.encode()


def parse_produce_line(line: str) -> ProduceLine:
    """Parse `{"partition"?, "key"|"key_b64", "value"|"value_b64", "headers"?}`."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise LineError(f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise LineError("each line must be a JSON object")
    unknown = set(obj) - PRODUCE_FIELDS
    if unknown:
        raise LineError(
            f"unknown field(s) {sorted(unknown)}; allowed: {sorted(PRODUCE_FIELDS)}"
        )
    partition = obj.get("partition")
    if partition is not None and (
        not isinstance(partition, int) or isinstance(partition, bool) or partition < 0
    ):
        raise LineError("partition must be a non-negative integer")
    headers_obj = obj.get("headers") or {}
    if not isinstance(headers_obj, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in headers_obj.items()
    ):
        raise LineError("headers must be an object of string keys to string (or null) values")
    headers = tuple((k, None if v is None else v.encode()) for k, v in headers_obj.items())
    return ProduceLine(partition, _bytes_field(obj, "key"), _bytes_field(obj, "value"), headers)


def _text_or_b64(out: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode()
    except UnicodeDecodeError:
        out[f"{name}_b64"] = base64.b64encode(data).decode()


def consumed_to_json(rec: ConsumedRecord) -> str:
    """One output line; binary keys/values/headers appear as `*_b64`, tombstones as null."""
    out: dict[str, Any] = {
        "topic": rec.topic,
        "partition": rec.partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
    }
    _text_or_b64(out, "key", rec.key)
    _text_or_b64(out, "value", rec.value)
    try:
        out["headers"] = {k: None if v is None else v.decode() for k, v in rec.headers}
    except UnicodeDecodeError:
        out["headers_b64"] = {
            k: None if v is None else base64.b64encode(v).decode() for k, v in rec.headers
        }
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))
