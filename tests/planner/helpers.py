"""Hand-built planner snapshots: a controllable clock, no I/O."""

from __future__ import annotations

import itertools
from dataclasses import replace

from planner import FileView, PartitionState, SegmentView, Snapshot, TopicPolicy

NOW = 1_000_000_000
TOPICS = {
    "c": TopicPolicy("c", compacted=True),
    "d": TopicPolicy("d", compacted=False, deletes=True),
    "lag": TopicPolicy("lag", compacted=True, min_compaction_lag_ms=60_000),
    "forced": TopicPolicy("forced", compacted=True, min_cleanable_dirty_ratio=0.99,
                          max_compaction_lag_ms=10_000),
    "tomb": TopicPolicy("tomb", compacted=True, delete_retention_ms=1_000),
}
_seg_ids = itertools.count(1)


def seg(fid: int, topic: str, base: int, last: int, *, part: int = 0, size: int = 1000,
        cleaned: int | None = None, created: int = NOW - 100_000, max_ts: int | None = None,
        tombstones: int = 0, sid: int | None = None) -> SegmentView:
    sid = next(_seg_ids) if sid is None else sid
    return SegmentView(sid, fid, topic, part, base, last, size, last - base + 1, tombstones,
                       created if max_ts is None else max_ts, created, cleaned)


def file(fid: int, *segs: SegmentView, level: int = 0, created: int = NOW - 100_000,
         leased: bool = False) -> FileView:
    """A file holding `segs` (their file id is set to `fid`)."""
    segs = tuple(replace(s, file_id=fid) for s in segs)
    return FileView(fid, level, sum(s.size_bytes for s in segs), created,
                    any(TOPICS[s.topic].compacted for s in segs), leased, segs)


def snapshot(*files: FileView, clean: dict[tuple[str, int], int] | None = None) -> Snapshot:
    """Partition states derived from the segments; the cleaner checkpoint defaults to just
    after the last segment a whole-log clean produced."""
    nxt: dict[tuple[str, int], int] = {}
    start: dict[tuple[str, int], int] = {}
    ckpt: dict[tuple[str, int], int] = {}
    for f in files:
        for s in f.segments:
            nxt[s.tp] = max(nxt.get(s.tp, 0), s.last_offset + 1)
            start[s.tp] = min(start.get(s.tp, s.base_offset), s.base_offset)
            if s.cleaned_at_ms is not None:
                ckpt[s.tp] = max(ckpt.get(s.tp, 0), s.last_offset + 1)
    ckpt.update(clean or {})
    parts = {tp: PartitionState(tp[0], tp[1], start[tp], n, ckpt.get(tp, 0))
             for tp, n in nxt.items()}
    return Snapshot(TOPICS, parts, tuple(files))


def l0_files(n: int, *, created: int, topic: str = "d", start_id: int = 1,
             size: int = 1000) -> list[FileView]:
    """n L0 files each holding the next 10 offsets of `topic`/0."""
    return [file(start_id + i, seg(start_id + i, topic, i * 10, i * 10 + 9, size=size),
                 created=created) for i in range(n)]
