"""Keyed 16-byte record-key hashes used by compaction to deduplicate without reading keys.

The hash is BLAKE2b (digest_size 16) keyed with a per-cluster secret, so keys cannot be
probed from hashes and collisions cannot be forced by producers. A null key hashes to
`NULL_KEY_HASH` (all zero); a real key whose digest is all zero has its last byte set to 1
so the two stay distinguishable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

KEY_HASH_SIZE = 16
NULL_KEY_HASH = bytes(KEY_HASH_SIZE)
_ZERO_FIXED = bytes(KEY_HASH_SIZE - 1) + b"\x01"


class KeyHasher:
    """Hashes record keys with BLAKE2b-128 keyed by the cluster secret."""

    __slots__ = ("_base",)

    def __init__(self, secret: bytes) -> None:
        if not 1 <= len(secret) <= hashlib.blake2b.MAX_KEY_SIZE:
            raise ValueError(f"secret must be 1..{hashlib.blake2b.MAX_KEY_SIZE} bytes")
        # Keying costs one compression block; copying the keyed state avoids redoing it.
        self._base = hashlib.blake2b(key=secret, digest_size=KEY_HASH_SIZE)

    def hash(self, key: bytes | None) -> bytes:
        """The 16-byte hash of `key`; NULL_KEY_HASH for None."""
        if key is None:
            return NULL_KEY_HASH
        h = self._base.copy()
        h.update(key)
        digest = h.digest()
        return _ZERO_FIXED if digest == NULL_KEY_HASH else digest

    def hash_many(self, keys: Iterable[bytes | None]) -> bytes:
        """Concatenated hashes of `keys`, in order."""
        return b"".join(map(self.hash, keys))
