"""The compaction service, `silt compactor`: rounds of jobs, and retention and garbage
collection on timers of their own, until stopped.

- Retention (`Compactor.apply_retention`) runs once at start, so the first round does not
  rewrite data already past it, then every retention.check.interval.ms; GC
  (`Compactor.collect_garbage`) at start and every gc.interval.ms. Both run on their own
  threads (`clock.Periodic`): a long job delays neither, and neither waits for a round.
- A round plans and runs the jobs proposed now, one after the other, then waits
  poll.interval.s (or until stopped).
- `stop()` (SIGTERM/SIGINT in `silt compactor`): no new job starts; the job under way has
  shutdown.timeout.ms to finish (a commit under way always finishes). Past that, the merge
  gives up at its next partition boundary: outputs deleted, pending rows abandoned, the job
  row released as `abandoned` (its files free for other workers at once). Then the timers
  stop (a retention or GC call under way finishes) and `run` returns.

A crash (SIGKILL) leaves what a crash inside a job leaves (compactor/worker.py): a leased
job row until lease.ms passes, then another worker takes the job over; pending rows and
objects that GC removes. Retention is one transaction; GC marks rows before it deletes.
"""

from __future__ import annotations

import logging
import threading

from clock import Periodic

from .worker import Compactor, JobReport

log = logging.getLogger(__name__)


def describe(report: JobReport) -> str:
    """One line for a job report (logs; the report itself goes as the `job` extra field)."""
    st = report.stats
    line = (f"job {report.spec_id} {report.outcome}: {report.input_files} files"
            f" {report.input_bytes:,} B -> {report.output_files} files {report.output_bytes:,} B;"
            f" records {st.get('records_in', 0)} -> {st.get('records_out', 0)}"
            f" (duplicates {st.get('duplicates_dropped', 0)},"
            f" tombstones {st.get('tombstones_dropped', 0)} dropped); {report.duration_s:.2f}s")
    return line + (f"; {report.error}" if report.error else "")


class CompactorService:
    """One compaction worker for as long as it runs (`run` in a thread of its own, `stop`
    from any other). Any number may run at once, anywhere: jobs are leased."""

    def __init__(self, compactor: Compactor) -> None:
        self.compactor = compactor
        self.config = compactor.config
        self.clock = compactor.clock
        self.rounds = 0  # rounds completed (tests, logs)
        self._cond = threading.Condition()
        self._stop_at: float | None = None  # the clock's monotonic time of `stop`
        self.retention = Periodic("silt-retention", self.config.retention_check_interval_ms,
                                  self.apply_retention, self.clock)
        self.gc = Periodic("silt-gc", self.config.gc_interval_ms, self.collect_garbage,
                           self.clock)

    @property
    def stopping(self) -> bool:
        return self._stop_at is not None

    def stop(self) -> None:
        """Start no new job; give the current one shutdown.timeout.ms to finish. Idempotent
        (a repeated signal changes nothing); returns at once (`run` returns when done)."""
        with self._cond:
            if self._stop_at is None:
                self._stop_at = self.clock.monotonic()
            self._cond.notify_all()

    def cancelled(self) -> bool:
        """Whether the current job's time is up: stopped shutdown.timeout.ms ago or more."""
        stop_at = self._stop_at
        return (stop_at is not None and
                self.clock.monotonic() - stop_at >= self.config.shutdown_timeout_ms / 1000)

    def run(self) -> None:
        """Run until `stop`, then finish or abandon the job under way and stop the timers."""
        log.info("compactor %s: rounds every %ss, retention every %d ms, GC every %d ms",
                 self.compactor.owner, self.config.poll_interval_s,
                 self.config.retention_check_interval_ms, self.config.gc_interval_ms)
        try:
            self.apply_retention()
        except Exception:
            log.exception("retention failed at start; its timer tries again")
        self.retention.start()
        self.gc.start(now=True)
        try:
            while not self.stopping:
                self.run_round()
                with self._cond:
                    deadline = self.clock.monotonic() + self.config.poll_interval_s
                    while (not self.stopping
                           and (left := deadline - self.clock.monotonic()) > 0):
                        self.clock.wait(self._cond, left)
        finally:
            self.retention.stop()
            self.gc.stop()
        log.info("compactor %s stopped", self.compactor.owner)

    def run_round(self) -> list[JobReport]:
        """Plan, then run the jobs proposed now until stopped; never raises."""
        reports: list[JobReport] = []
        try:
            for spec in self.compactor.plan().jobs:
                if self.stopping:
                    break
                report = self.compactor.run_job(spec, cancelled=self.cancelled)
                reports.append(report)
                level = logging.WARNING if report.outcome in ("failed", "unknown") else logging.INFO
                log.log(level, "%s", describe(report), extra={"job": report.as_dict()})
        except Exception:
            log.exception("compaction round failed; retrying after the poll interval")
        self.rounds += 1
        return reports

    def apply_retention(self) -> None:
        """The retention timer's call: `Compactor.apply_retention` (raises; Periodic logs it
        and the next interval tries again)."""
        result = self.compactor.apply_retention()
        if result.changes or result.retired_file_ids:
            log.info("retention: %d partitions' log start moved, %d files retired",
                     len(result.changes), len(result.retired_file_ids),
                     extra={"partitions": len(result.changes),
                            "retired_files": len(result.retired_file_ids)})

    def collect_garbage(self) -> None:
        """The GC timer's call: `Compactor.collect_garbage` (raises, as retention's)."""
        report = self.compactor.collect_garbage()
        if report.deleted or report.uploads_aborted:
            log.info("gc: deleted %d objects, aborted %d unfinished uploads",
                     len(report.deleted), report.uploads_aborted,
                     extra={"deleted": len(report.deleted),
                            "uploads_aborted": report.uploads_aborted})
