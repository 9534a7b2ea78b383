"""Object-store settings (the `store` section): which store, by URL. Declared once here;
loaded by `settings.load` (env `SILT_STORE`, as always)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlparse

from settings import Section, text

SCHEMES = ("file", "memory", "s3")
URL = "url"
ENV_URL = "SILT_STORE"


@dataclass(frozen=True, slots=True)
class StoreConfig(Section):
    """Where objects live: `file:///path` (or `file://./relative`), `memory://name` (tests),
    `s3://bucket/prefix` (boto3 and the standard AWS variables)."""

    SECTION: ClassVar[str] = "store"

    url: str = text(URL, "file://./silt-data/objects",
                    allowed="a URL file:///path, memory://name or s3://bucket/prefix",
                    check=lambda url: urlparse(url).scheme in SCHEMES, env=ENV_URL)
