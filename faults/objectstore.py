"""An object store whose writes wait for a gate the test opens: a slow (or stalled) S3, so
that a test can hold an agent's flush at its PUT for as long as it needs."""

from __future__ import annotations

import threading

from objectstore import ObjectStore
from objectstore.base import ObjectWriter
from objectstore.wrappers import StoreWrapper


class GatedStore(StoreWrapper):
    """Forwards to `inner`, but `put` and `put_stream` first wait until `gate` is set
    (set: no wait). `waiting` counts the writes waiting right now."""

    def __init__(self, inner: ObjectStore, gate: threading.Event | None = None) -> None:
        super().__init__(inner)
        self.gate = gate if gate is not None else threading.Event()
        self._lock = threading.Lock()
        self.waiting = 0

    def _pass(self) -> None:
        with self._lock:
            self.waiting += 1
        self.gate.wait()
        with self._lock:
            self.waiting -= 1

    def put(self, key: str, data: bytes) -> None:
        self._pass()
        self.inner.put(key, data)

    def put_stream(self, key: str) -> ObjectWriter:
        self._pass()
        return self.inner.put_stream(key)
