"""A controllable clock and a metadata store on each backend, with a topic to produce to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from clock import ManualClock
from metadata import MetadataStore


@pytest.fixture
def md(metadata_url: str, clock: ManualClock) -> Iterator[MetadataStore]:
    store = MetadataStore.open(metadata_url, clock=clock, create=True)
    store.create_topic("t", 2)
    yield store
    store.close()
