"""What one field of a kio schema entity is, read from what kio's generated schemas state.

kio's entities (kio.schema.*) are frozen dataclasses: each field's metadata names its Kafka
type (`kafka_type`: "int32", "string", "uuid", ...) and, for a tagged field, its tag
(`tag`); its annotation says whether it is an array (`tuple[X, ...]`), nullable
(`X | None`) and a nested entity (a dataclass). The bounds walk (bounds.py) and the error
answers (error_responses.py) classify fields by these facts. kio's own classifier lives in
a private module (kio.serial._introspect) that may change in any release; this one reads
only the schema data, and tests/protocol/test_schema_fields.py checks it against every
request and response schema kio ships, so a kio whose schemas say something else fails
there, loudly, and not at a client's request.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import EllipsisType, NoneType, UnionType
from typing import Any, Union, get_args, get_origin


class SchemaFieldError(TypeError):
    """A schema field this module does not understand (kio's schemas changed shape)."""


@dataclass(frozen=True, slots=True)
class _Kind:
    """A field's kind (the subclass) and its inner type: the entity class, or the
    primitive's Python type (None stripped, the array's item for an array)."""

    type_: Any


class PrimitiveField(_Kind):
    """A single value of a Kafka primitive type (int32, string, uuid, records, ...)."""

    __slots__ = ()


class PrimitiveTupleField(_Kind):
    """An array of Kafka primitive values."""

    __slots__ = ()


class EntityField(_Kind):
    """One nested entity (a struct of the schema)."""

    __slots__ = ()


class EntityTupleField(_Kind):
    """An array of nested entities."""

    __slots__ = ()


FieldClass = PrimitiveField | PrimitiveTupleField | EntityField | EntityTupleField


def get_schema_field_type(field: dataclasses.Field[Any]) -> str:
    """The field's Kafka type as the schema names it (metadata `kafka_type`)."""
    value = field.metadata.get("kafka_type")
    if not isinstance(value, str):
        raise SchemaFieldError(f"field {field.name} has no kafka_type in its metadata")
    return value


def get_field_tag(field: dataclasses.Field[Any]) -> int | None:
    """The tag of a tagged field, None for a field of the fixed part."""
    tag = field.metadata.get("tag")
    return None if tag is None else int(tag)


def _without_none(annotation: Any, name: str) -> tuple[Any, bool]:
    """`X | None` -> (X, True); anything else -> (it, False)."""
    if get_origin(annotation) not in (UnionType, Union):
        return annotation, False
    args = [a for a in get_args(annotation) if a is not NoneType]
    if len(args) != 1 or len(get_args(annotation)) != 2:
        raise SchemaFieldError(f"field {name}: only a union with None is a schema type")
    return args[0], True


def _array_item(annotation: Any, name: str) -> Any | None:
    """The item type of `tuple[X, ...]`; None when the annotation is no array."""
    if get_origin(annotation) is not tuple:
        return None
    args = get_args(annotation)
    if len(args) != 2 or not isinstance(args[1], EllipsisType):
        raise SchemaFieldError(f"field {name}: an array is tuple[X, ...], not {annotation}")
    return args[0]


def is_optional(field: dataclasses.Field[Any]) -> bool:
    """Whether the field (an array's items, for an array) may be null."""
    annotation = field.type
    item = _array_item(annotation, field.name)
    return _without_none(annotation if item is None else item, field.name)[1]


def classify_field(field: dataclasses.Field[Any]) -> FieldClass:
    """Entity or primitive, one or an array, with the inner type (None stripped)."""
    if isinstance(field.type, str):
        raise SchemaFieldError(f"field {field.name}: annotation not evaluated")
    inner, _ = _without_none(field.type, field.name)
    item = _array_item(inner, field.name)
    if item is None:
        return EntityField(inner) if dataclasses.is_dataclass(inner) else PrimitiveField(inner)
    return (EntityTupleField(item) if dataclasses.is_dataclass(item)
            else PrimitiveTupleField(item))
