"""A bounded LRU of segment reads, so N consumers of one hot partition cost one GET.

Entries are kept as Fetch serves them: each batch's baseOffset made absolute (stored
relative to the segment's base offset) and partitionLeaderEpoch -1, patched once when the
segment is read, so a fetch sends views of an entry without copying or patching it.
Segments are immutable (an object is never rewritten and a segment's bytes never change), so
entries never go stale; compaction only makes them unreferenced and LRU drops them. Misses are
single-flight: concurrent readers of one segment wait for the one GET in progress.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future

from fileformat.batch import rebase_in_place
from metadata import SegmentInfo
from objectstore import ObjectStore

Key = tuple[str, int, int]  # object key, data position, data length


class SegmentCache:
    """Whole-segment ranged GETs, kept up to `max_bytes` (0: no caching, still single-flight)."""

    def __init__(self, store: ObjectStore, max_bytes: int) -> None:
        self._store = store
        self._max = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[Key, bytearray] = OrderedDict()
        self._bytes = 0
        self._loading: dict[Key, Future[bytearray]] = {}
        self.gets = 0  # GETs issued (misses), for tests and stats

    def get(self, seg: SegmentInfo) -> bytearray:
        """The segment's batches at absolute offsets, leader epoch -1, from the cache or one
        ranged GET. Callers must not modify them (fetches send views of them)."""
        key = (seg.object_key, seg.data_pos, seg.data_len)
        with self._lock:
            data = self._entries.get(key)
            if data is not None:
                self._entries.move_to_end(key)
                return data
            loading = self._loading.get(key)
            if loading is None:
                mine: Future[bytearray] = Future()
                self._loading[key] = mine
                self.gets += 1
        if loading is not None:
            return loading.result()
        try:
            data = self._store.get_range_writable(seg.object_key, seg.data_pos,
                                                  seg.data_pos + seg.data_len)
            rebase_in_place(data, seg.base_offset)
        except BaseException as exc:
            with self._lock:
                del self._loading[key]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._loading[key]
            if len(data) <= self._max:
                self._entries[key] = data
                self._bytes += len(data)
                while self._bytes > self._max:
                    _, old = self._entries.popitem(last=False)
                    self._bytes -= len(old)
        mine.set_result(data)
        return data
