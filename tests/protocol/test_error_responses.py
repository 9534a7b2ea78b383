"""A request's error response in its own API's shape (agent/protocol/error_responses.py),
what a request out of turn in a SASL exchange is answered: for every API version served, a
response kio decodes that carries the error, echoing what the request named."""

from __future__ import annotations

from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from agent.protocol.apis import TABLE
from agent.protocol.codec import frame
from agent.protocol.error_responses import error_response
from faults.frames import good_batch, sample
from faults.suites.protocol import error_codes

ILLEGAL = ErrorCode.illegal_sasl_state
VERSIONS = [(key, v) for key, api in sorted(TABLE.items())
            for v in range(api.min_version, api.max_version + 1)]


def _request(key: int, version: int) -> Any:
    return sample(load_request_schema(key, version), key, good_batch([b"x"]))


@pytest.mark.parametrize(("key", "version"), VERSIONS)
def test_every_api_version_answers_the_error_in_its_own_shape(key: int, version: int) -> None:
    body = frame(7, error_response(key, version, _request(key, version), ILLEGAL))[4:]
    cls = load_response_schema(key, version)
    header, n = entity_reader(cls.__header_schema__)(body, 0)
    decoded, _ = entity_reader(cls)(body, n)
    assert header.correlation_id == 7
    assert ILLEGAL in error_codes(decoded)
    assert set(error_codes(decoded)) == {ILLEGAL}


def test_per_partition_apis_echo_what_the_request_named() -> None:
    answer: Any = error_response
    produce = answer(0, 9, _request(0, 9), ILLEGAL)
    [topic] = produce.responses
    assert topic.name == "fz" and [p.index for p in topic.partition_responses] == [0]
    assert topic.partition_responses[0].error_code == ILLEGAL
    fetch = answer(1, 12, _request(1, 12), ILLEGAL)
    assert fetch.error_code == ILLEGAL and fetch.responses[0].topic == "fz"
    coordinators = answer(10, 4, _request(10, 4), ILLEGAL).coordinators
    assert [(c.key, c.error_code) for c in coordinators] == [("fzg", ILLEGAL)]
    deleted = answer(20, 5, _request(20, 5), ILLEGAL).responses  # bare names
    assert [(t.name, t.error_code) for t in deleted] == [("fz-del", ILLEGAL)]
    versions = answer(18, 3, _request(18, 3), ILLEGAL)  # as Kafka: no key listed
    assert versions.error_code == ILLEGAL and versions.api_keys == ()
    handshake = answer(17, 1, _request(17, 1), ILLEGAL)
    assert handshake.error_code == ILLEGAL and handshake.mechanisms == ()
