"""Fixtures of the metadata tests: a controllable clock and a store on each backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from clock import ManualClock
from metadata import MetadataStore


@pytest.fixture
def store(metadata_url: str, clock: ManualClock) -> Iterator[MetadataStore]:
    md = MetadataStore.open(metadata_url, clock=clock, create=True)
    yield md
    md.close()
