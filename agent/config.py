"""Agent settings (the `agent` section): how often and how much an agent buffers before it
writes one object. Declared once here; loaded by `settings.load`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fileformat import WRITABLE_COMPRESSIONS, Compression
from settings import Section, choice, integer

LINGER_MS = "linger.ms"
FLUSH_BYTES = "flush.bytes"
BUFFER_MEMORY = "buffer.memory"
MAX_BLOCK_MS = "max.block.ms"
COMPRESSION_TYPE = "compression.type"

OBJECT_PREFIX = "data/"


@dataclass(frozen=True, slots=True)
class AgentConfig(Section):
    """How often and how much an agent buffers before it writes one object."""

    SECTION: ClassVar[str] = "agent"

    linger_ms: int = integer(LINGER_MS, 250, lo=0)
    flush_bytes: int = integer(FLUSH_BYTES, 8 * 1024 * 1024, lo=1)
    buffer_memory: int = integer(BUFFER_MEMORY, 64 * 1024 * 1024, lo=1)  # >= flush.bytes
    max_block_ms: int = integer(MAX_BLOCK_MS, 60_000, lo=0)
    compression: Compression = choice(COMPRESSION_TYPE, Compression.NONE, WRITABLE_COMPRESSIONS)

    def check_across(self) -> None:
        if self.buffer_memory < self.flush_bytes:
            raise self.invalid(BUFFER_MEMORY, self.buffer_memory,
                               f"an integer >= {FLUSH_BYTES} ({self.flush_bytes})")
