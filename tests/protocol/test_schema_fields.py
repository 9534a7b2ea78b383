"""agent/protocol/schema_fields.py against every schema kio ships: each field of each
request and response entity (nested ones too) is classified without error, as kio's own
private classifier classifies it where that still exists, with the Kafka types and tags the
wire format needs. A kio whose schemas say something else fails here, not at a client."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Iterator
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.fetch.v15.request import FetchRequest
from kio.schema.index import api_key_map
from kio.schema.produce.v9.request import ProduceRequest

from agent.protocol.schema_fields import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)


def _entities() -> Iterator[type[Any]]:
    """Every request and response entity of every API version kio knows, and the entities
    nested in them, each once."""
    seen: set[type[Any]] = set()
    stack: list[type[Any]] = []
    for key in api_key_map:
        for load in (load_request_schema, load_response_schema):
            version = 0
            while True:
                try:
                    stack.append(load(key, version))
                except Exception:
                    break
                version += 1
    while stack:
        entity = stack.pop()
        if entity in seen:
            continue
        seen.add(entity)
        yield entity
        for f in dataclasses.fields(entity):
            kind = classify_field(f)
            if isinstance(kind, EntityField | EntityTupleField):
                stack.append(kind.type_)


def test_every_field_of_every_schema_is_classified() -> None:
    private: Any = None
    with contextlib.suppress(ImportError):  # kio's own, private: compared while it exists
        private = importlib.import_module("kio.serial._introspect")
    entities = fields = 0
    for entity in _entities():
        entities += 1
        for f in dataclasses.fields(entity):
            fields += 1
            kind = classify_field(f)
            optional = is_optional(f)
            tag = get_field_tag(f)
            if not isinstance(kind, EntityField | EntityTupleField):
                assert get_schema_field_type(f)
            if private is not None:
                theirs = private.classify_field(f)
                assert type(kind).__name__ == type(theirs).__name__, (entity, f.name)
                assert kind.type_ is theirs.type_, (entity, f.name)
                assert optional == private.is_optional(f), (entity, f.name)
                assert tag == private.get_field_tag(f), (entity, f.name)
    assert entities > 800 and fields > 2500  # kio 0.6.5: 836 entities, 2,653 fields


def test_known_fields_are_what_the_kafka_schemas_say() -> None:
    produce = {f.name: f for f in dataclasses.fields(ProduceRequest)}
    assert isinstance(classify_field(produce["topic_data"]), EntityTupleField)
    assert isinstance(classify_field(produce["acks"]), PrimitiveField)
    assert get_schema_field_type(produce["acks"]) == "int16"
    assert is_optional(produce["transactional_id"])
    assert get_schema_field_type(produce["transactional_id"]) == "string"
    assert not is_optional(produce["acks"]) and get_field_tag(produce["acks"]) is None
    fetch = {f.name: f for f in dataclasses.fields(FetchRequest)}
    assert get_field_tag(fetch["cluster_id"]) == 0 and is_optional(fetch["cluster_id"])
    assert isinstance(classify_field(fetch["replica_state"]), EntityField)
    topics = classify_field(fetch["topics"])
    assert isinstance(topics, EntityTupleField)
    partitions = {f.name: f for f in dataclasses.fields(topics.type_)}["partitions"]
    assert isinstance(classify_field(partitions), EntityTupleField)
    produce_topic = classify_field(produce["topic_data"]).type_
    records = {f.name: f for f in dataclasses.fields(
        classify_field({f.name: f for f in dataclasses.fields(produce_topic)}
                       ["partition_data"]).type_)}["records"]
    assert get_schema_field_type(records) == "records" and is_optional(records)
    assert isinstance(classify_field(
        {f.name: f for f in dataclasses.fields(topics.type_)}["topic_id"]), PrimitiveField)
