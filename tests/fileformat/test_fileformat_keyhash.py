"""Keyed key hashes: null handling, secret dependence, the all-zero digest rule."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from fileformat import KEY_HASH_SIZE, NULL_KEY_HASH, KeyHasher


def test_hash_is_keyed_blake2b_128() -> None:
    hasher = KeyHasher(b"s3cret")
    expected = hashlib.blake2b(b"key", key=b"s3cret", digest_size=16).digest()
    assert hasher.hash(b"key") == expected
    assert len(expected) == KEY_HASH_SIZE
    assert KeyHasher(b"other").hash(b"key") != expected
    assert hasher.hash(b"") != NULL_KEY_HASH


def test_null_key_and_hash_many() -> None:
    hasher = KeyHasher(b"s")
    assert hasher.hash(None) == NULL_KEY_HASH == bytes(16)
    assert hasher.hash_many([b"a", None, b"b"]) == (
        hasher.hash(b"a") + NULL_KEY_HASH + hasher.hash(b"b")
    )
    assert hasher.hash_many([]) == b""


def test_all_zero_digest_stays_distinct_from_null(monkeypatch: pytest.MonkeyPatch) -> None:
    class ZeroDigest:
        def copy(self) -> Any:
            return self

        def update(self, data: bytes) -> None:
            pass

        def digest(self) -> bytes:
            return bytes(16)

    hasher = KeyHasher(b"s")
    monkeypatch.setattr(hasher, "_base", ZeroDigest())
    assert hasher.hash(b"unlucky") == bytes(15) + b"\x01"
    assert hasher.hash(None) == NULL_KEY_HASH


def test_secret_length_is_checked() -> None:
    with pytest.raises(ValueError):
        KeyHasher(b"")
    with pytest.raises(ValueError):
        KeyHasher(bytes(65))
