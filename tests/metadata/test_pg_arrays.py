"""Column arrays handed to PostgreSQL as one literal each (engine.pg_arrays) round-trip."""

from __future__ import annotations

import sqlalchemy as sa

from metadata.engine import pg_arrays


def test_numbers_become_one_literal_and_text_stays_a_list() -> None:
    assert pg_arrays(([1, -2, 3], [True, False], [None, 7], ["a,b", "{"]),
                     ("bigint", "boolean", "integer", "text")) == (
        "{1,-2,3}", "{True,False}", "{NULL,7}", ["a,b", "{"])


def test_literals_round_trip_through_postgres(postgres_url: str) -> None:
    big = [2**62, -(2**62), 0, *range(1000)]
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            row = conn.exec_driver_sql(
                "SELECT %s::bigint[], %s::integer[], %s::boolean[], %s::text[]",
                pg_arrays((big, [None, 5], [True, False], ['q"u\\o,te', "{}"]),
                          ("bigint", "integer", "boolean", "text"))).one()
    finally:
        engine.dispose()
    assert list(row) == [big, [None, 5], [True, False], ['q"u\\o,te', "{}"]]
