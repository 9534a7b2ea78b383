"""One session-scoped local Spark for all Spark tests (`local[2,2]`: 2 cores, and a task
may fail once and be retried, as on a cluster)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

if os.environ.get("SILT_REQUIRE_SERVERS", "").lower() in ("1", "true", "yes"):
    import pyspark  # noqa: F401  (CI: `make test` installs the spark extra; never skip)
else:
    pytest.importorskip("pyspark", reason="pip install 'siltstream[spark]'")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from spark.session import get_session

    session = get_session("local[2,2]", "silt-tests",
                          **{"spark.sql.shuffle.partitions": "2",
                             "spark.driver.memory": "1g"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
