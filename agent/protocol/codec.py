"""Request/response (de)serialisation with kio, and building version-specific responses.

kio has one frozen dataclass per message version; `Builder` constructs a response of the
request's version by class name, passing only the fields that version has, so a handler is
written once for its whole version range; a field no version of the class has (a misspelling)
is refused with a TypeError. A handler on a hot path may instead return an
`Encoded` body that it wrote itself (Produce: kio costs ~100 µs per 4-partition response, at
a thousand requests a second; Fetch: kio copies every record byte into its buffer); its tests
check those bytes equal kio's for every version. A body is a sequence of buffers sent one
after the other (Fetch's record bytes are views of the segment cache, never joined).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from collections.abc import Awaitable, Iterable, Sequence
from datetime import timedelta
from types import ModuleType
from typing import Any

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32
from kio.static.protocol import Entity

from .bounds import Unknown, check_request
from .errors import ProtocolError

FRAME = struct.Struct(">i")
PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id: every header starts so
NO_THROTTLE = timedelta(0)

Buffer = bytes | bytearray | memoryview  # memoryviews of bytes: len() is their byte count


def write_uvarint(out: bytearray, n: int) -> None:
    """Append `n` as an unsigned varint (flexible versions' lengths: compact arrays and
    strings are length + 1, null is 0)."""
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)


def write_array_length(out: bytearray, n: int, flexible: bool) -> None:
    """Append an array's length: a compact one (n + 1, varint) in flexible versions, else
    an int32."""
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += n.to_bytes(4, "big", signed=True)


def write_topic_head(out: bytearray, topic: str, partitions: int, flexible: bool) -> None:
    """Append a response topic's name and the length of its partition array (what the
    hand-written Produce and Fetch responses share)."""
    name = topic.encode()
    if flexible:
        write_uvarint(out, len(name) + 1)
    else:
        out += len(name).to_bytes(2, "big", signed=True)
    out += name
    write_array_length(out, partitions, flexible)


@functools.cache
def _fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


@functools.cache
def _fields_anywhere(api_key: int, class_name: str) -> frozenset[str]:
    """The fields of `class_name` in any version of API `api_key`'s responses that kio
    knows (computed once per class)."""
    known: set[str] = set()
    for version in schema_name_map[api_key_map[api_key]]:
        cls = getattr(load_payload_module(api_key, version, EntityType.response), class_name,
                      None)
        if cls is not None:
            known |= _fields(cls)
    return frozenset(known)


def _check_fields(api_key: int, class_name: str, names: Iterable[str]) -> None:
    """Refuse field names that no version of `class_name` has (a TypeError, as a dataclass
    refuses an unexpected keyword)."""
    unknown = set(names) - _fields_anywhere(api_key, class_name)
    if unknown:
        raise TypeError(f"{class_name} has no field {', '.join(sorted(unknown))} in any "
                        f"version of API {api_key}")


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    """A response body already in wire bytes, for API `api_key` at `version`: `parts` sent
    one after the other."""

    api_key: int
    version: int
    parts: Sequence[Buffer]


Response = Entity | Encoded
"""A response body: a kio entity (`Builder`) or bytes the handler wrote (`Encoded`)."""
Reply = Response | None | Awaitable[Response | None]
"""What a handler answers: a response, None (no response: Produce with acks=0), or an
awaitable of either (written when it resolves, in request order)."""


class Builder:
    """Builds entities of one API version's response module by class name."""

    __slots__ = ("api_key", "module", "version")

    def __init__(self, api_key: int, version: int) -> None:
        self.api_key, self.version = api_key, version
        self.module: ModuleType = load_payload_module(api_key, version, EntityType.response)

    def __call__(self, class_name: str, /, **values: object) -> Entity:
        """`class_name`(**values), dropping the values this version's class has no field
        for; a TypeError for a value that no version of the class has a field for."""
        cls = getattr(self.module, class_name)
        known = _fields(cls)
        if not known.issuperset(values):
            _check_fields(self.api_key, class_name, values)
            values = {k: v for k, v in values.items() if k in known}
        entity: Entity = cls(**values)
        return entity

    def encoded(self, *parts: Buffer) -> Encoded:
        """A response of this API and version whose body the handler wrote itself."""
        return Encoded(self.api_key, self.version, parts)

    def has(self, name: str, field: str) -> bool:
        """Whether this version's `name` has `field` (a TypeError if no version has it)."""
        if field in _fields(getattr(self.module, name)):
            return True
        _check_fields(self.api_key, name, (field,))
        return False


@functools.cache
def _request_schema(api_key: int, version: int) -> type[Any]:
    """kio's request class (cached: kio resolves the name through importlib on every call,
    ~50 µs, as much as decoding a small Produce)."""
    schema: type[Any] = load_request_schema(api_key, version)
    return schema


def decode_request(payload: bytes, api_key: int, version: int) -> tuple[Any, Any]:
    """(header, request) of a frame whose key and version the caller already accepted;
    its lengths are checked against the frame first (bounds.py: kio would reserve what a
    length claims)."""
    unknown = check_request(payload, api_key, version)
    if unknown:
        payload = without_unknown_tags(payload, unknown)
    cls = _request_schema(api_key, version)
    try:
        header, n = entity_reader(cls.__header_schema__)(payload, 0)
        request, _ = entity_reader(cls)(payload, n)
    except Exception as exc:  # kio raises several types on malformed input
        raise ProtocolError(f"undecodable {cls.__name__} v{version}: {exc}") from exc
    return header, request


def without_unknown_tags(payload: bytes, unknown: list[Unknown]) -> bytes:
    """The frame without the tagged fields its version does not define (`check_request`
    found them), each section's count lowered to match: what kio can read. Kafka's
    generated readers keep such fields aside (`_unknownTaggedFields`) and read on, so a
    client of a newer Kafka may send them; they mean nothing to this server's handlers."""
    out = bytearray()
    pos = 0
    for start, counted, count, fields in unknown:
        out += payload[pos:start]
        write_uvarint(out, count)
        pos = counted
        for field, field_end in fields:
            out += payload[pos:field]
            pos = field_end
    out += payload[pos:]
    return bytes(out)


@functools.cache
def _header_tail(api_key: int, version: int) -> bytes:
    """What follows the correlation id in the response header of API `api_key` at
    `version` (kio's encoding, computed once: nothing in v0, the empty tagged-field section
    in flexible v1), so an `Encoded` reply's frame head is one struct pack."""
    header_cls = load_response_schema(api_key, version).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(correlation_id=i32(0)))
    return buf.getvalue()[_CORRELATION.size:]


_CORRELATION = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # frame size, correlation id


@dataclasses.dataclass(frozen=True, slots=True)
class RawToken:
    """A SASL token sent as a bare size-prefixed frame, with no response header (the
    answer to a token after a v0 SaslHandshake)."""

    token: bytes


def encode_response(correlation_id: int, response: Any) -> list[Buffer]:
    """The size-prefixed frame as buffers to send in order: size, response header (its
    version from kio) and body (a kio entity, or `Encoded` parts, which are not copied);
    a `RawToken` is its size and bytes alone."""
    if isinstance(response, Encoded):
        tail = _header_tail(response.api_key, response.version)
        size = _CORRELATION.size + len(tail) + sum(map(len, response.parts))
        return [_HEAD.pack(size, correlation_id) + tail, *response.parts]
    if isinstance(response, RawToken):
        return [FRAME.pack(len(response.token)) + response.token]
    header_cls = type(response).__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(buf, header_cls(correlation_id=i32(correlation_id)))
    entity_writer(type(response))(buf, response)
    with buf.getbuffer() as view:
        FRAME.pack_into(view, 0, len(view) - FRAME.size)
    return [buf.getvalue()]


def frame(correlation_id: int, response: Any) -> bytes:
    """`encode_response` joined into one bytes object (for tests and small replies)."""
    return b"".join(encode_response(correlation_id, response))
