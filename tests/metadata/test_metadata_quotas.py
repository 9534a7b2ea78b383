"""Client quotas in the metadata store, on SQLite and PostgreSQL: Kafka's checks before
anything is stored, per entity; set, replace and remove in one transaction."""

from __future__ import annotations

import pytest

from metadata import MetadataStore
from metadata.errors import InvalidQuotaError
from metadata.quotas import CLIENT_ID, IP, USER, entity_of


def test_quotas_set_replaced_removed_per_entity(store: MetadataStore) -> None:
    alice = entity_of([(USER, "alice")])
    default_client = entity_of([(CLIENT_ID, None), (USER, "alice")])
    assert default_client == ((CLIENT_ID, None), (USER, "alice"))
    errors = store.alter_client_quotas([
        (alice, {"producer_byte_rate": 1000.0, "request_percentage": 12.5}),
        (default_client, {"consumer_byte_rate": 0.0}),  # refused: not above 0
    ])
    assert errors[0] is None and "must be greater than 0" in str(errors[1])
    assert store.client_quotas() == {alice: {"producer_byte_rate": 1000.0,
                                             "request_percentage": 12.5}}
    assert store.alter_client_quotas([(alice, {"producer_byte_rate": 2000.0,
                                               "request_percentage": None})]) == [None]
    assert store.client_quotas() == {alice: {"producer_byte_rate": 2000.0}}
    assert store.alter_client_quotas([(default_client, {"consumer_byte_rate": 5.0})],
                                     validate_only=True) == [None]
    assert store.alter_client_quotas([(alice, {"producer_byte_rate": None})]) == [None]
    assert store.client_quotas() == {}


@pytest.mark.parametrize(("pairs", "words"), [
    ([], "Invalid empty client quota entity"),
    ([(USER, "a"), (USER, "b")], "duplicate entity entry user"),
    ([("group", "g")], "Unhandled client quota entity type"),
    ([(IP, "1.2.3.4"), (USER, "a")], "IP entity should"),
    ([(IP, "not-an-ip")], "not-an-ip is not a valid IP"),
])
def test_entities_kafka_refuses(pairs: list[tuple[str, str | None]], words: str) -> None:
    with pytest.raises(InvalidQuotaError, match=words):
        entity_of(pairs)
