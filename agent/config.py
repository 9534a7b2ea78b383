"""Agent settings: names are constants, values are validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

from fileformat import Compression

LINGER_MS = "linger.ms"
FLUSH_BYTES = "flush.bytes"
BUFFER_MEMORY = "buffer.memory"
MAX_BLOCK_MS = "max.block.ms"

DEFAULT_LINGER_MS = 250
DEFAULT_FLUSH_BYTES = 8 * 1024 * 1024
DEFAULT_BUFFER_MEMORY = 64 * 1024 * 1024
DEFAULT_MAX_BLOCK_MS = 60_000
OBJECT_PREFIX = "data/"


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """How often and how much an agent buffers before it writes one object."""

    linger_ms: int = DEFAULT_LINGER_MS
    flush_bytes: int = DEFAULT_FLUSH_BYTES
    buffer_memory: int = DEFAULT_BUFFER_MEMORY
    max_block_ms: int = DEFAULT_MAX_BLOCK_MS
    compression: Compression = Compression.NONE

    def __post_init__(self) -> None:
        checks = {
            LINGER_MS: self.linger_ms >= 0,
            FLUSH_BYTES: self.flush_bytes > 0,
            BUFFER_MEMORY: self.buffer_memory >= self.flush_bytes,
            MAX_BLOCK_MS: self.max_block_ms >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                value = getattr(self, name.replace(".", "_"))
                raise ValueError(
                    f"invalid agent setting {name}={value} (linger.ms>=0, flush.bytes>0,"
                    " buffer.memory>=flush.bytes, max.block.ms>=0)"
                )
