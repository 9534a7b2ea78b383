"""A request's error response in its API's own shape, as Kafka's
`AbstractRequest.getErrorResponse` builds one: what a SASL connection gets for a request
sent in the middle of its exchange (ILLEGAL_SASL_STATE, then the connection closes, as
Kafka's SaslServerAuthenticator.handleSaslToken).

Built from kio's response schema of the request's API and version, one rule for every API
(no per-API code): every `error_code` is the error; every array of the response echoes the
request's corresponding array element by element (the one of the same name, else the one
whose elements share the most key fields: topic names and ids, partition indexes, group and
transactional ids), with the elements' key fields copied (`partition` and `index` are a
`partition_index`, `topic` is a `name`) and a request's list of names or indexes becoming
the elements' key field; every other field is its schema default, else empty or zero. So a
Produce is answered with each of its partitions at the error, a Metadata with each topic
asked for, a JoinGroup with the top-level error.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import typing
import uuid
from collections.abc import Sequence
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.protocol import Entity

from .schema_fields import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

# Fields that name what a request's array element is about (copied into the answer's).
_ALIASES = {"partition": "partition_index", "index": "partition_index",
            "partition_id": "partition_index", "topic": "name", "topic_name": "name",
            "user": "name"}
_KEYS = frozenset({"name", "topic_id", "partition_index", "group_id", "transactional_id",
                   "resource_type", "resource_name", "member_id", "group_instance_id",
                   "key", "key_type", "mechanism", "broker_id"})
# The key a request's bare name or index becomes (the first of these the element has).
_STRING_KEYS = ("name", "group_id", "transactional_id", "resource_name", "key")
_INT_KEYS = ("partition_index", "broker_id")


def _key(name: str) -> str:
    return _ALIASES.get(name, name)


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(cls)


@functools.cache
def _keys_of(cls: type) -> frozenset[str]:
    """The key fields of entity class `cls` (under their answer's names)."""
    return frozenset(k for f in _fields(cls) if (k := _key(f.name)) in _KEYS)


def error_response(api_key: int, version: int, request: Any, error: ErrorCode) -> Entity:
    """The response to `request` (API `api_key`, `version`) saying `error` (module
    docstring)."""
    entity: Entity = _answer(load_response_schema(api_key, version), request, error)
    return entity


def _zero(f: dataclasses.Field[Any]) -> Any:
    """A field's value when its schema gives none: null if nullable, else empty or zero."""
    if is_optional(f):
        return None
    tp: Any = f.type  # a class (the module's annotations are evaluated)
    if typing.get_origin(tp) is tuple:
        return ()
    kafka_type = get_schema_field_type(f)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return tp.parse(datetime.timedelta(0))
    if kafka_type == "datetime_i64":
        return tp.parse(datetime.datetime.fromtimestamp(0, datetime.UTC))
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type == "string":
        return ""
    if kafka_type == "bytes":
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "float64":
        return tp(0.0)
    return tp(0)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _zero(f)


def _answer(cls: type, source: Any, error: ErrorCode) -> Any:
    """An instance of response entity `cls` answering `source` (a request entity, or None)
    with `error`."""
    given = {_key(f.name): getattr(source, f.name) for f in _fields(type(source))} \
        if dataclasses.is_dataclass(source) else {}
    values: dict[str, Any] = {}
    for f in _fields(cls):
        match classify_field(f):
            case EntityTupleField(inner):
                values[f.name] = tuple(_element(inner, item, error)
                                       for item in _counterpart(f.name, inner, source))
            case EntityField(inner):
                values[f.name] = None if is_optional(f) else _answer(
                    inner, given.get(f.name), error)
            case PrimitiveTupleField():
                values[f.name] = ()
            case PrimitiveField():
                if get_schema_field_type(f) == "error_code":
                    values[f.name] = error
                elif (k := _key(f.name)) in _KEYS and k in given and _fits(f, given[k]):
                    values[f.name] = given[k]
                else:
                    values[f.name] = _default(f)
    return cls(**values)


def _fits(f: dataclasses.Field[Any], value: Any) -> bool:
    """Whether a request's `value` may stand in `f` (the same kind of value)."""
    if value is None:
        return is_optional(f)
    return isinstance(value, _kinds(f))


def _kinds(f: dataclasses.Field[Any]) -> tuple[type, ...]:
    args = typing.get_args(f.type) or (f.type,)
    return tuple(typing.get_origin(a) or a for a in args if a is not type(None))


def _element(cls: type, item: Any, error: ErrorCode) -> Any:
    """An answer element for one request element: an entity, or a bare name or index."""
    if dataclasses.is_dataclass(item):
        return _answer(cls, item, error)
    at = _bare_key(cls, item)
    answer = _answer(cls, None, error)
    return answer if at is None else dataclasses.replace(answer, **{at: item})


def _bare_key(cls: type, item: Any) -> str | None:
    """The field of answer elements `cls` that a request's bare `item` (a name or an
    index) fills, if any."""
    names = _STRING_KEYS if isinstance(item, str) else _INT_KEYS
    return next((f.name for f in _fields(cls) if _key(f.name) in names and _fits(f, item)),
                None)


def _counterpart(name: str, inner: type, source: Any) -> Sequence[Any]:
    """The request's array that a response array of `inner` elements called `name`
    answers: the same name; else the array of entities with the most key fields in common;
    else an array of names or indexes that an element's key takes; else, if the elements
    have an error code and no key, the request's only array of entities (its results one
    by one); else none."""
    if not dataclasses.is_dataclass(source):
        return ()
    arrays = {f.name: value for f in _fields(type(source))
              if isinstance(value := getattr(source, f.name), tuple)}
    if name in arrays:
        return arrays[name]
    want = _keys_of(inner)
    best: tuple[int, Sequence[Any]] = (0, ())
    for value in arrays.values():
        if value and dataclasses.is_dataclass(value[0]):
            element: type = type(value[0])
            shared = len(want & _keys_of(element))
            if shared > best[0]:
                best = (shared, value)
    if best[0]:
        return best[1]
    bare = [v for v in arrays.values() if v and not dataclasses.is_dataclass(v[0])]
    if (found := next((v for v in bare if _bare_key(inner, v[0]) is not None), None)):
        return found
    entities = [v for v in arrays.values() if v and dataclasses.is_dataclass(v[0])]
    errors = any(f.metadata.get("kafka_type") == "error_code" for f in _fields(inner))
    return entities[0] if not want and errors and len(entities) == 1 else ()
