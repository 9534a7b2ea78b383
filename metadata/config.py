"""Metadata-store settings (the `metadata` section): which database, by URL. Loaded by
`settings.load` (env `SILT_METADATA`, as always); the URL forms are `engine_url`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from settings import Section, text

from .engine import DEFAULT_URL, engine_url
from .errors import UnsupportedMetadataUrlError

URL = "url"
ENV_URL = "SILT_METADATA"


def _supported(url: str) -> bool:
    try:
        engine_url(url)
    except UnsupportedMetadataUrlError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class MetadataConfig(Section):
    """Where metadata lives: `sqlite:///path` (embedded) or `postgresql://...`."""

    SECTION: ClassVar[str] = "metadata"

    url: str = text(URL, DEFAULT_URL, allowed="a URL sqlite:///path or postgresql://...",
                    check=_supported, env=ENV_URL)
