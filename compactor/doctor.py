"""`silt doctor`: the object store checked against the metadata.

What is a problem (`Problem.kind`):
- `missing`, `size`: a live file's object is not in the store, or its size is not the one
  its row records (a truncated or overwritten object);
- `orphan`: an object under a data prefix (the agents' `data/`, the compactor's
  `compacted/`) without a file row, or whose row is deleted (an upload that landed after GC
  gave up on it, or data of another metadata database). `fix` deletes those older than the
  GC grace period (`compactor.file.delete.delay.ms`, the delay GC gives retired files), aged
  by the store's own modification time; a younger one, or one whose age the store does not
  tell (memory://), is only reported;
- `stale_pending`: a pending file row older than `compactor.lease.ms`: an upload that
  neither committed nor was abandoned in that time (GC removes it after its grace period);
- `stray_segments`: live segments in a file that is not live (none should exist: a file
  is retired with its last live segment);
- `dangling_segment`: a segment row naming a file or partition row that no longer exists
  (none should: the segments table has no foreign keys since schema v16, its writers hold
  both rows and its deleters delete segments first); the first 100 are reported;
- `corrupt` (`deep` only): a live object fails fileformat's verification (every batch CRC,
  the batches' framing against the chunk index, the META CRCs, the footer), or its layout
  or one of its live segments' rows disagrees with what the object says of itself.

Requests: one LIST per 1,000 objects under each data prefix (sizes and ages come with the
listing) and a HEAD per live object outside them (siltstream writes none); `deep` adds two
GETs per live object (META + footer, then header + DATA: one chunk in memory at a time);
`fix` one DELETE per 1,000 orphans removed. Every count is in `DoctorReport.requests`.

Agents and compactors may run meanwhile: the metadata is read first, then the store listed,
and every disagreement found is checked again against its key's current row before it is
reported (a file retired and collected since the first read is not missing; an object
registered since is not an orphan). `fix` changes no metadata: a crash while it deletes
leaves some orphans, which the next run finds again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field
from typing import Any

from clock import SYSTEM_CLOCK, Clock
from fileformat import FormatError, verify_streams
from metadata import FileInfo, MetadataStore, SegmentInfo
from metadata.schema import FILE_DELETED, FILE_LIVE, FILE_PENDING
from metadata.segments import index_mismatch
from objects.keys import DATA_PREFIXES
from objectstore import MTIME_SLACK_MS, ObjectInfo, ObjectStore

from .config import FILE_DELETE_DELAY_MS, LEASE_MS, CompactorConfig

MISSING = "missing"
SIZE = "size"
ORPHAN = "orphan"
STALE_PENDING = "stale_pending"
STRAY_SEGMENTS = "stray_segments"
DANGLING_SEGMENT = "dangling_segment"
CORRUPT = "corrupt"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong: its kind, the object key, what is wrong; `removed`: `fix` deleted
    the object (an old orphan), so it is wrong no more."""

    kind: str
    key: str
    detail: str
    file_id: int | None = None
    removed: bool = False


@dataclass(slots=True)
class DoctorReport:
    """What `doctor` checked, what it found and the store requests it made."""

    live_files: int = 0
    live_bytes: int = 0
    objects_listed: int = 0
    objects_verified: int = 0  # deep: read whole and verified
    problems: list[Problem] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Nothing is wrong (any more: removed orphans do not count)."""
        return all(p.removed for p in self.problems)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (`silt doctor --json`)."""
        return {"ok": self.ok, "live_files": self.live_files, "live_bytes": self.live_bytes,
                "objects_listed": self.objects_listed,
                "objects_verified": self.objects_verified,
                "problems": [asdict(p) for p in self.problems], "requests": self.requests}

    def lines(self) -> Iterator[str]:
        """Human-readable form: one line per problem, then a summary."""
        for p in self.problems:
            file = "" if p.file_id is None else f" (file {p.file_id})"
            done = "; removed" if p.removed else ""
            yield f"{p.kind}: {p.key}{file}: {p.detail}{done}"
        verified = f", {self.objects_verified} verified" if self.objects_verified else ""
        left = sum(not p.removed for p in self.problems)
        removed = len(self.problems) - left
        yield (f"{self.live_files} live files ({self.live_bytes:,} bytes),"
               f" {self.objects_listed} objects listed{verified}; "
               + (f"{left} problems" if left else "no problem")
               + (f", {removed} orphans removed" if removed else "")
               + f"; requests {self.requests}")


def doctor(store: ObjectStore, metadata: MetadataStore, config: CompactorConfig | None = None,
           *, deep: bool = False, fix: bool = False, clock: Clock = SYSTEM_CLOCK
           ) -> DoctorReport:
    """Check `store` against `metadata` (see the module docstring); `config` gives the GC
    grace period and the lease (default: the compactor section's defaults)."""
    config = config or CompactorConfig()
    before = store.counters()
    audit = metadata.audit_snapshot(segments=deep)
    live = {f.object_key: f for f in audit.files if f.state == FILE_LIVE}
    listed = _list(store, live)
    now = clock.now_ms()
    report = DoctorReport(live_files=len(live), objects_listed=len(listed),
                          live_bytes=sum(f.size or 0 for f in live.values()))

    # Disagreements between the first read and the listing, checked again (see above).
    absent = [f for key, f in live.items() if key not in listed]
    resized = [f for key, f in live.items() if key in listed and listed[key].size != f.size]
    rows = {f.object_key for f in audit.files}
    unknown = [o for key, o in listed.items() if key not in rows and key.startswith(DATA_PREFIXES)]
    current = metadata.files_by_key([f.object_key for f in absent + resized]
                                    + [o.key for o in unknown])

    def still_live(f: FileInfo) -> bool:
        row = current.get(f.object_key)
        return row is not None and row.state == FILE_LIVE

    for f in absent:
        if still_live(f):
            report.problems.append(Problem(MISSING, f.object_key,
                                           f"live, {f.size:,} bytes, not in the store", f.id))
    for f in resized:
        if still_live(f):
            report.problems.append(Problem(
                SIZE, f.object_key, f"{listed[f.object_key].size:,} bytes in the store,"
                f" {f.size:,} in its row", f.id))
    report.problems += _orphans(store, unknown, current, now, config, fix)
    for f in audit.files:
        age = now - f.state_changed_at_ms
        if f.state == FILE_PENDING and age > config.lease_ms:
            report.problems.append(Problem(
                STALE_PENDING, f.object_key, f"pending for {age / 1000:,.0f} s, longer than"
                f" compactor.{LEASE_MS} ({config.lease_ms / 1000:,.0f} s)", f.id))
    for f, n in audit.stray:
        report.problems.append(Problem(STRAY_SEGMENTS, f.object_key,
                                       f"{n} live segments in a {f.state} file", f.id))
    keys = {f.id: f.object_key for f in audit.files}
    for seg_id, file_id, topic_id, partition in audit.dangling:
        report.problems.append(Problem(
            DANGLING_SEGMENT, keys.get(file_id, ""), f"segment {seg_id} (topic id {topic_id},"
            f" partition {partition}) names a file or partition that no longer exists",
            file_id))
    if deep:
        wrong = {p.key for p in report.problems}
        by_file: dict[int, list[SegmentInfo]] = {}
        for seg in audit.segments:
            by_file.setdefault(seg.file_id, []).append(seg)
        for key, f in live.items():
            if key in wrong:
                continue
            problem = _verify(store, f, by_file.get(f.id, ()), still_live)
            if problem is None or problem.kind == CORRUPT:  # read whole
                report.objects_verified += 1
            if problem is not None:
                report.problems.append(problem)
    used = store.counters() - before
    report.requests = {k: v for k, v in used.as_dict().items() if v and not k.startswith("bytes")}
    return report


def _list(store: ObjectStore, live: dict[str, FileInfo]) -> dict[str, ObjectInfo]:
    """The objects under the data prefixes (one listing each), and the live objects outside
    them (one HEAD each; absent ones left out)."""
    listed = {o.key: o for prefix in DATA_PREFIXES for o in store.list(prefix)}
    for key in sorted(live):
        if not key.startswith(DATA_PREFIXES):
            with suppress(FileNotFoundError):
                listed[key] = ObjectInfo(key, store.size(key))
    return listed


def _orphans(store: ObjectStore, unknown: Sequence[ObjectInfo], current: dict[str, FileInfo],
             now: int, config: CompactorConfig, fix: bool) -> list[Problem]:
    """The listed objects without a row (or with a deleted one) now; with `fix`, those past
    the grace period deleted (one request per 1,000)."""
    grace = config.grace_ms + MTIME_SLACK_MS
    found: list[tuple[ObjectInfo, str, bool]] = []
    for o in unknown:
        row = current.get(o.key)
        if row is not None and row.state != FILE_DELETED:
            continue  # registered since the first read
        why = "no file row" if row is None else f"its row (file {row.id}) is deleted"
        if o.modified_ms is None:
            found.append((o, f"{why}; the store keeps no modification time", False))
            continue
        age = now - o.modified_ms
        old = age > grace
        when = "past" if old else "within"
        found.append((o, f"{why}; written {age / 1000:,.0f} s ago, {when} the GC grace"
                         f" (compactor.{FILE_DELETE_DELAY_MS}: {config.grace_ms / 1000:,.0f} s)",
                      old))
    removable = [o.key for o, _, old in found if old]
    if fix and removable:
        store.delete_many(removable)
    return [Problem(ORPHAN, o.key, f"{o.size:,} bytes, {why}", removed=fix and old)
            for o, why, old in found]


def _verify(store: ObjectStore, f: FileInfo, segments: Sequence[SegmentInfo],
            still_live: Callable[[FileInfo], bool]) -> Problem | None:
    """Read a live object whole (two streams) and check it: fileformat's verification, its
    layout against its row, each live segment's row against its chunk's index entry."""
    recorded = f.layout
    assert recorded is not None  # a live file has its layout
    key = f.object_key
    try:
        with ExitStack() as stack:
            tail = stack.enter_context(store.open_stream(key, recorded.meta_offset,
                                                         recorded.size))
            head = stack.enter_context(store.open_stream(key, 0, recorded.meta_offset))
            layout = verify_streams(tail, head, recorded.size, recorded.meta_offset)
    except FileNotFoundError:  # deleted since it was listed: GC, or a real loss
        if still_live(f):
            return Problem(MISSING, key, f"live, {recorded.size:,} bytes, gone while read",
                           f.id)
        return None
    except FormatError as exc:
        return Problem(CORRUPT, key, str(exc), f.id)
    row = (recorded.data_offset, recorded.data_length, recorded.meta_length)
    found = (layout.data_offset, layout.data_length, layout.meta_length)
    if row != found:
        return Problem(CORRUPT, key, f"layout (data offset, data length, meta length) {found},"
                                     f" its row says {row}", f.id)
    chunks = {(c.topic, c.partition): c for c in layout.chunks}
    for seg in segments:
        chunk = chunks.get((seg.topic, seg.partition))
        where = f"live segment {seg.id} ({seg.topic}/{seg.partition})"
        if chunk is None:
            return Problem(CORRUPT, key, f"{where} has no chunk in the object", f.id)
        differ = index_mismatch(seg, chunk)
        if differ:
            return Problem(CORRUPT, key, f"{where} differs from its chunk's index entry:"
                                         f" {', '.join(differ)}", f.id)
    return None
