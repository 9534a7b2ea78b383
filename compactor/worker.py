"""Compaction workers: plan, lease, merge, commit, collect garbage.

One job, step by step, and what a crash at each step leaves (each output object is written
through `objects.ObjectUpload`, whose docstring has what a crash leaves of an object):
1. `lease_job` — a leased job row holding the input files. Crash: the lease expires and
   another worker takes the job over with a higher fence.
2. an `ObjectUpload` per output (its pending row registered before its upload starts).
3. merge: two streams per input; outputs streamed to the store (multipart), then finished.
   Crash: pending rows, and objects only of finished outputs; GC removes both.
4. `commit_compaction` — one transaction: fence and inputs revalidated, input segments
   replaced by output segments, inputs retired. Crash before it: as step 3, topic unchanged.
   Crash after it: the new data is visible; the inputs are deleted after the grace period.
   If the commit is refused (stale fence, inputs changed) nothing changed and the outputs
   are deleted; if its outcome is unknown the outputs are left alone (they may be live).
0. `run_once` first applies retention (`MetadataStore.apply_retention`, one transaction):
   files it empties are retired like replaced inputs. (The service, service.py, applies it
   on a timer of its own instead.)
5. GC: retired inputs whose grace period (file.delete.delay.ms, 60 s) has passed are
   marked deleting, their objects deleted, then marked deleted; the store's unfinished
   uploads (step 3's crash) older than max(grace, lease.ms) are aborted; then history rows past
   their retention are pruned (`MetadataStore.prune`: deleted files and their segments,
   finished jobs). Crash anywhere: the next pass carries on where this one stopped.
A job given up because its worker stops (`cancelled`, checked at each partition boundary of
the merge) is as a definite failure: outputs deleted, pending rows abandoned, the job row
released as `abandoned` (its files free at once). Crash before the release: as step 3.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import telemetry
from clock import SYSTEM_CLOCK, Clock
from metadata import MetadataStore
from metadata.errors import (
    CommitConflictError,
    CommitUnknownError,
    JobConflictError,
    JobLeasedError,
    StaleLeaseError,
)
from metadata.models import CompactionOutput, RetentionResult
from metadata.models import Snapshot as MetadataSnapshot
from metadata.schema import FILE_PENDING
from metadata.segments import output_segment
from metadata.txnlog import AbortedIndex
from objects import ObjectUpload, abandoning
from objects.keys import compacted_key
from objectstore import MTIME_SLACK_MS, ObjectStore, RequestCounts
from planner import JobSpec, Plan, Snapshot, propose, propose_all, validate

from .config import CompactorConfig
from .errors import JobAbandoned
from .health import observe_round
from .merge import (
    InputFile,
    InputOpener,
    MergeStats,
    OutputTarget,
    merge,
    open_streams,
)
from .snapshot import PlannerSnapshots

log = logging.getLogger(__name__)

# How often the GC timer lists the store's unfinished uploads (one LIST-class request): an
# upload is abandoned only by a killed process or a retried CreateMultipartUpload, so an
# hour's delay costs little storage and saves ~85,000 listings a month at a 30 s GC timer.
UPLOAD_SWEEP_INTERVAL_MS = 3_600_000


@dataclass(slots=True)
class JobReport:
    """What one job did (also stored as the job's result in the metadata store)."""

    spec_id: str
    outcome: str  # committed | skipped | lost | failed | unknown | abandoned
    trigger: str = ""
    reason: str = ""
    job_id: int | None = None
    fence: int | None = None
    input_files: int = 0
    output_files: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    bytes_read: int = 0
    requests: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class GarbageReport:
    """What one GC pass did: the object keys it deleted, the unfinished uploads it
    aborted."""

    deleted: list[str]
    uploads_aborted: int = 0


def never() -> bool:
    """A job that is never cancelled."""
    return False


def default_owner() -> str:
    """A worker identity that is unique across machines and restarts."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class _Output:
    """One output object: its upload and what the merge put into it."""

    def __init__(self, upload: ObjectUpload) -> None:
        self.upload = upload
        self.target = OutputTarget(upload.start())

    def finish(self) -> CompactionOutput:
        layout = self.upload.finish()
        segments = []
        for info, ci in zip(self.target.chunks, layout.chunks, strict=True):
            assert info.partition == (ci.topic, ci.partition)
            segments.append(output_segment(ci, info.base_offset, info.last_offset,
                                           info.cleaned_at_ms))
        return CompactionOutput(self.upload.file_id, layout, tuple(segments))


class Compactor:
    """Runs compaction jobs against one store and metadata store; safe to run many at once.

    `open_input` is how a job opens each input file (`merge.InputOpener`; default: two
    forward-only streams per file).
    """

    def __init__(self, store: ObjectStore, metadata: MetadataStore,
                 config: CompactorConfig | None = None, *,
                 clock: Clock = SYSTEM_CLOCK, owner: str | None = None,
                 open_input: InputOpener = open_streams) -> None:
        self.store = store
        self.metadata = metadata
        self.config = config or CompactorConfig()
        self.clock = clock
        self.owner = owner or default_owner()
        self.open_input = open_input
        self._snapshots = PlannerSnapshots(self.config.rewrite_codec)
        # Pending outputs of this worker's jobs under way, which its own GC leaves alone.
        self._in_flight: set[int] = set()
        self._uploads_swept_at: int | None = None  # last unfinished-upload sweep (ms)

    # ----------------------------------------------------------------- planning

    def snapshot(self) -> tuple[MetadataSnapshot, Snapshot]:
        """The metadata snapshot and the planner's view of it (both incremental: a round
        reads and converts only the files changed since the last one)."""
        snap = self.metadata.snapshot()
        return snap, self._snapshots.convert(snap)

    def plan(self, *, everything: bool = False) -> Plan:
        """What the planner proposes now (`everything`: ignore triggers, compact fully).
        With a metrics port open, the round's gauges come from this snapshot."""
        _, snap = self.snapshot()
        if telemetry.serving():
            observe_round(self.metadata, snap, self.clock.now_ms(), self.config.planner)
        fn = propose_all if everything else propose
        return fn(snap, self.clock.now_ms(), self.config.planner)

    def run_once(self, *, everything: bool = False) -> list[JobReport]:
        """Apply retention, run every job proposed now one after the other, then collect
        garbage. Retention goes first so no job rewrites data that is past its retention.
        No unfinished-upload sweep here: a `compact --once` run from cron would list them at
        every run (the service's timer and `silt gc` do it)."""
        self.apply_retention()
        reports = [self.run_job(spec) for spec in self.plan(everything=everything).jobs]
        self.collect_garbage(sweep_uploads=False)
        return reports

    # ----------------------------------------------------------------- one job

    def run_job(self, spec: JobSpec, *, cancelled: Callable[[], bool] = never) -> JobReport:
        """Lease, merge and commit one job; never raises for the job's own failures. Its
        report is counted in the compaction metrics.

        `cancelled` is asked at every partition boundary of the merge (not during the
        commit): once it answers True the job is abandoned and its lease released."""
        report = self._run_job(spec, cancelled)
        telemetry.compaction_job(
            report.outcome, report.duration_s, report.input_bytes, report.output_bytes,
            report.stats.get("duplicates_dropped", 0), report.stats.get("tombstones_dropped", 0),
            [(p.topic, p.partition) for p in spec.partitions])
        return report

    def _run_job(self, spec: JobSpec, cancelled: Callable[[], bool]) -> JobReport:
        report = JobReport(spec.spec_id, "skipped", spec.trigger.value, spec.reason,
                           input_files=len(spec.input_file_ids))
        started = self.clock.monotonic()
        md_snap, snap = self.snapshot()
        problems = validate(spec, snap)
        if problems:
            report.error = "; ".join(problems)
            return report
        try:
            lease = self.metadata.lease_job(spec.spec_id, spec.input_file_ids, owner=self.owner,
                                            lease_ms=self.config.lease_ms)
        except (JobLeasedError, JobConflictError) as exc:
            report.error = str(exc)
            return report
        report.job_id, report.fence = lease.job_id, lease.fence
        before = self.store.counters()
        outputs: list[_Output] = []
        uploads: list[ObjectUpload] = []
        try:
            with ExitStack() as stack, abandoning(self.store, self.metadata, uploads,
                                                  delete=True):
                stack.callback(lambda: self._in_flight.difference_update(
                    u.file_id for u in uploads))
                stats = self._merge(spec, md_snap, lease, outputs, uploads, cancelled)
                committed = [o.finish() for o in outputs if o.target.chunks]
                for o in outputs:
                    if not o.target.chunks:  # nothing went into it after all
                        o.upload.abandon()
                report.output_files = len(committed)
                report.output_bytes = sum(c.layout.size for c in committed)
                report.stats = stats.as_dict()
                report.input_bytes = stats.input_bytes
                self._account(report, before, started)  # as stored with the commit
                report.outcome = "committed"
                self.metadata.commit_compaction(lease, outputs=committed,
                                                result=report.as_dict(),
                                                checkpoints=stats.checkpoints,
                                                markers_dropped=stats.markers_dropped)
        except (StaleLeaseError, CommitConflictError) as exc:  # outputs discarded
            report.outcome, report.error = "lost", str(exc)
        except CommitUnknownError as exc:
            report.outcome, report.error = "unknown", str(exc)  # outputs may be live: kept
        except JobAbandoned as exc:
            report.outcome, report.error = "abandoned", str(exc)
            self._release(lease, report)
        except Exception as exc:
            log.exception("job %s failed", spec.spec_id)
            report.outcome, report.error = "failed", f"{type(exc).__name__}: {exc}"
            self._release(lease, report)
        self._account(report, before, started)
        return report

    def _account(self, report: JobReport, before: RequestCounts, started: float) -> None:
        """The job's requests and bytes read since the store's counters were `before`, and
        its duration since `started` (monotonic)."""
        used = self.store.counters() - before
        report.requests = {k: v for k, v in used.as_dict().items()
                           if v and not k.startswith("bytes")}
        report.bytes_read = used.bytes_received
        report.duration_s = round(self.clock.monotonic() - started, 4)

    def _release(self, lease: Any, report: JobReport) -> None:
        """End a job that will not commit (`failed`/`abandoned`): its files free at once.
        If this fails the lease expires instead (lease.ms)."""
        try:
            self.metadata.release_job(lease, state=report.outcome, result=report.as_dict())
        except Exception:
            log.warning("could not release job %s", report.spec_id, exc_info=True)

    def _merge(self, spec: JobSpec, md_snap: MetadataSnapshot, lease: Any,
               outputs: list[_Output], uploads: list[ObjectUpload],
               cancelled: Callable[[], bool]) -> MergeStats:
        files = {f.id: f for f in md_snap.files}
        inputs = []
        for fid in spec.input_file_ids:
            f = files[fid]
            assert f.layout is not None  # an input is committed
            segs = {(s.topic, s.partition): (s.base_offset, s.last_offset, s.cleaned_at_ms)
                    for s in md_snap.file_segments.get(fid, ())}
            inputs.append(InputFile(fid, f.object_key, f.layout, segs))

        def make(compacted_data: bool) -> Callable[[], OutputTarget]:
            def create() -> OutputTarget:
                upload = ObjectUpload(
                    self.store, self.metadata,
                    compacted_key(spec.output_level, compacted_data, self.clock),
                    level=spec.output_level, holds_compacted=compacted_data)
                uploads.append(upload)
                self._in_flight.add(upload.file_id)  # before the upload starts: see GC
                out = _Output(upload)
                outputs.append(out)
                return out.target
            return create

        renewed = [self.clock.monotonic()]

        def heartbeat() -> None:
            if cancelled():
                raise JobAbandoned(f"job {spec.spec_id} abandoned: the worker is stopping")
            if self.clock.monotonic() - renewed[0] > self.config.lease_ms / 3000:
                self.metadata.renew_lease(lease, self.config.lease_ms,
                                          [u.file_id for u in uploads])
                renewed[0] = self.clock.monotonic()

        # The compacted partitions' aborted transactions below what the job cleans (the
        # merge drops their records; a partition without any costs nothing more).
        found = self.metadata.aborted_transactions(
            [(p.topic, p.partition, 0, p.clean_upto_offset) for p in spec.partitions])
        return merge(self.store, inputs, spec.partitions, compacted_out=make(True),
                     delete_out=make(False), now_ms=self.clock.now_ms(),
                     memory_budget=self.config.memory_budget, heartbeat=heartbeat,
                     open_input=self.open_input,
                     aborted={tp: AbortedIndex(txns) for tp, txns in found.items()})

    # ----------------------------------------------------------------- retention

    def apply_retention(self) -> RetentionResult:
        """retention.ms / retention.bytes of delete-policy topics (one metadata transaction);
        emptied files are retired and deleted by `collect_garbage` after the grace period."""
        return self.metadata.apply_retention()

    # ----------------------------------------------------------------- garbage

    def collect_garbage(self, grace_ms: int | None = None,
                        sweep_uploads: bool | None = None) -> GarbageReport:
        """Delete objects of retired inputs past the grace period (`grace_ms`, default
        file.delete.delay.ms), and of abandoned uploads; abort the store's unfinished
        uploads (`_abort_unfinished_uploads`); then prune the metadata's history rows past
        their retention (finished jobs, deleted files and their segments:
        `MetadataStore.prune`). First it finishes what a crash left of a big topic deletion
        or creation (`MetadataStore.finish_hidden`), so those topics' files retire too.

        Pending outputs of jobs under way are left alone (collected, they would make the
        job's commit fail): this worker's own however long they run (the service calls this
        on a timer, during jobs), other workers' because each lease renewal restarts their
        outputs' age (`renew_lease`), every third of lease.ms; and any pending upload (an
        agent's flush too) is left for lease.ms at least, however short the grace (`silt gc
        --grace-ms 0` collects now without failing writes under way).

        The unfinished-upload sweep (one listing request) runs on the first call and then
        at most once per UPLOAD_SWEEP_INTERVAL_MS (`sweep_uploads` None: the service's
        timer), always (`silt gc`: True) or never (False: `run_once`): such uploads are
        rare, and a GC timer every 30 s would otherwise list them ~86,000 times a month per
        compactor."""
        if finished := self.metadata.finish_hidden():
            log.info("finished %d interrupted topic deletions or creations", finished)
        grace = self.config.grace_ms if grace_ms is None else grace_ms
        now = self.clock.now_ms()
        pending_before = now - max(grace, self.config.lease_ms)
        in_flight = frozenset(self._in_flight)
        due = [f for f in self.metadata.files_to_gc(now - grace)
               if f.id not in in_flight
               and (f.state != FILE_PENDING or f.state_changed_at_ms <= pending_before)]
        keys: list[str] = []
        if due:
            ids = self.metadata.mark_deleting([f.id for f in due])
            keys = [f.object_key for f in due if f.id in set(ids)]
            self.store.delete_many(keys)
            self.metadata.mark_deleted(ids)
        aborted = 0
        if sweep_uploads or (sweep_uploads is None and (
                self._uploads_swept_at is None
                or now - self._uploads_swept_at >= UPLOAD_SWEEP_INTERVAL_MS)):
            aborted = self._abort_unfinished_uploads(pending_before, in_flight)
            self._uploads_swept_at = now
        pruned = self.metadata.prune()
        if pruned.files or pruned.jobs:
            log.info("pruned %d deleted files (%d segments) and %d finished jobs",
                     pruned.files, pruned.segments, pruned.jobs)
        return GarbageReport(keys, aborted)

    def _abort_unfinished_uploads(self, pending_before: int, in_flight: frozenset[int]) -> int:
        """Abort the store's uploads begun before `pending_before` (now - max(grace,
        lease.ms), less the store clock's slack) and never finished: a process killed
        mid-upload, or a CreateMultipartUpload retried after its answer was lost, leaves
        them on S3, invisible and billed. One listing per call. An upload whose key is
        this worker's output in flight, or a pending file still renewed by its job's lease,
        may still complete: it is left alone, as its pending row is. Returns how many were
        aborted."""
        uploads = self.store.unfinished_uploads(pending_before - MTIME_SLACK_MS)
        if not uploads:
            return 0
        rows = self.metadata.files_by_key(u.key for u in uploads)
        aborted = 0
        for upload in uploads:
            row = rows.get(upload.key)
            if row is not None and (row.id in in_flight or (
                    row.state == FILE_PENDING and row.state_changed_at_ms > pending_before)):
                continue
            try:
                self.store.abort_upload(upload)
            except FileNotFoundError:
                continue  # finished or aborted since it was listed
            aborted += 1
        if aborted:
            log.info("aborted %d unfinished uploads", aborted)
        return aborted
