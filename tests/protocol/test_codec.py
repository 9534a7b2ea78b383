"""`codec.Builder`: a field the request's version lacks is dropped, a field no version of the
class has is refused; every response field the handlers name exists in some version; and an
`Encoded` reply's frame head is kio's response header."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import io
import struct
import typing
from datetime import timedelta
from pathlib import Path

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32

from agent.protocol import apis
from agent.protocol.apis import HEARTBEAT, METADATA, TABLE
from agent.protocol.codec import Builder, Encoded, _fields_anywhere, _request_schema, frame


def test_a_field_of_another_version_is_dropped() -> None:
    b = Builder(HEARTBEAT, 0)  # throttle_time_ms is v1+
    response = b("HeartbeatResponse", throttle_time=timedelta(0), error_code=ErrorCode.none)
    assert dataclasses.asdict(response)["error_code"] is ErrorCode.none
    assert not b.has("HeartbeatResponse", "throttle_time")
    assert Builder(HEARTBEAT, 1).has("HeartbeatResponse", "throttle_time")


def test_a_field_of_no_version_is_refused() -> None:
    b = Builder(HEARTBEAT, 4)
    with pytest.raises(TypeError, match="HeartbeatResponse has no field eror_code"):
        b("HeartbeatResponse", throttle_time=timedelta(0), eror_code=ErrorCode.none)
    with pytest.raises(TypeError, match="no field eror_code"):  # also when this version
        Builder(HEARTBEAT, 0)("HeartbeatResponse", eror_code=ErrorCode.none)  # lacks others
    with pytest.raises(TypeError, match="no field nodes"):
        b.has("HeartbeatResponse", "nodes")


def test_a_field_only_in_a_newer_version_is_known() -> None:
    # MetadataResponseTopic.topic_id is v10+: named at v1 it is dropped, not refused.
    topic = Builder(METADATA, 1)("MetadataResponseTopic", error_code=ErrorCode.none,
                                 name="t", topic_id=None, is_internal=False, partitions=(),
                                 topic_authorized_operations=i32(-2147483648))
    assert dataclasses.asdict(topic)["name"] == "t"


def _builder_calls() -> list[tuple[str, int, str, list[str]]]:
    """(module, line, class name, keyword names) of every `b("Class", k=...)` call in the
    handlers."""
    out = []
    for path in sorted(Path(apis.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "b" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                out.append((path.stem, node.lineno, node.args[0].value,
                            [k.arg for k in node.keywords if k.arg is not None]))
    return out


def test_every_field_a_handler_names_exists_in_some_version() -> None:
    keys = {api.name: api.key for api in TABLE.values()}
    calls = _builder_calls()
    assert len(calls) > 40
    for module, line, name, fields in calls:
        known = _fields_anywhere(keys[module], name)
        assert known, f"{module}:{line}: no version has a class {name}"
        assert set(fields) <= known, f"{module}:{line}: {name}: {set(fields) - known}"


def test_each_handler_takes_the_requests_of_the_versions_it_serves() -> None:
    """A handler module's `Request` is the union of kio's request classes of exactly the
    versions the dispatch table serves it for (what mypy checks the handler against)."""
    for api in TABLE.values():
        module = importlib.import_module(f"agent.protocol.apis.{api.name}")
        served = {_request_schema(api.key, v)
                  for v in range(api.min_version, api.max_version + 1)}
        declared = set(typing.get_args(module.Request)) or {module.Request}
        assert declared == served, api.name


def test_an_encoded_reply_is_framed_with_kios_response_header() -> None:
    """The head written for a handler's own bytes (`Encoded`) is the size and kio's response
    header of that API and version, for every version served."""
    for api in TABLE.values():
        for version in range(api.min_version, api.max_version + 1):
            header_cls = load_response_schema(api.key, version).__header_schema__
            buf = io.BytesIO()
            entity_writer(header_cls)(buf, header_cls(correlation_id=i32(-123456)))
            head = buf.getvalue()
            body = (b"body", memoryview(b"parts"))
            assert frame(-123456, Encoded(api.key, version, body)) == (
                struct.pack(">i", len(head) + 9) + head + b"bodyparts"), (api.name, version)
