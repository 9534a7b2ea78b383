"""Compaction on Spark executors: the planner runs on the driver, each job is one task.

The driver plans with `Compactor.plan` and parallelizes the JobSpecs, one partition each.
A task opens the store from the driver's `StoreSpec` (the URL with the endpoint, region and
addressing style the driver resolved: an executor's environment need not name them; its
credentials come from its own AWS chain or `spark.executorEnv.*`) and the metadata store
from its URL, and calls the very same `Compactor.run_job(spec)` as a local worker; it
returns the job report as a dict. A task that raises (a job's own failures never do) is
retried by Spark; once Spark gives up, the run raises SparkJobError with the task's error.

Spark may retry a failed task or run a speculative copy. The job lease and its fencing token
decide what a second attempt of the same spec does:
- the job already committed (the first attempt's result was lost): the attempt commits
  nothing and returns the report stored with the committed job;
- the job is leased by an attempt that crashed after its merge, before its commit: a retry
  waits for that lease to expire, takes the job over with fence + 1 and finishes it (the
  crashed attempt's outputs stay pending; GC deletes them);
- two attempts race (speculation): both may merge, only the lease holder with the current
  fence can commit; the other loses cleanly (`lost`, outputs discarded) or sees the commit.
A first attempt that finds the job leased elsewhere (another `silt compactor`) is skipped,
exactly as a local worker would be.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from clock import SYSTEM_CLOCK
from compactor import Compactor, CompactorConfig, JobReport
from metadata import MetadataStore
from objectstore import StoreSpec, open_store
from planner import JobSpec

from .errors import SparkJobError, first_error
from .session import get_session

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[2]"
RETRY_POLL_S = 0.25
RETRY_WAIT_LEASES = 3  # a retry waits at most this many lease periods for a stale lease

# How a run opens the metadata store from its URL, on the driver and in every task. It is
# shipped to the executors with the task (cloudpickle), so it must be picklable and its
# module importable there; fault-injection tests pass one that wraps the store.
MetadataOpener = Callable[[str], MetadataStore]


def _committed_report(md: MetadataStore, spec_id: str) -> dict[str, Any] | None:
    """The stored report of this spec's committed job, if an earlier attempt committed it."""
    for job in reversed(md.list_jobs(state="committed")):
        if job.spec_id == spec_id:
            stored = dict(job.result or {})
            fields = {f.name for f in dataclasses.fields(JobReport)}
            report = {k: v for k, v in stored.items() if k in fields}
            report.update(spec_id=spec_id, outcome="committed", job_id=job.id, fence=job.fence)
            return report
    return None


def _leased_until(md: MetadataStore, spec_id: str) -> int | None:
    """When the current lease of this spec's job expires (ms), or None if it is not leased."""
    held = [j.lease_expires_ms for j in md.list_jobs(state="leased") if j.spec_id == spec_id]
    return max(held) if held else None


def run_spec(store: str | StoreSpec, metadata_url: str, spec: JobSpec, config: CompactorConfig,
             *, attempt: int = 0, open_metadata: MetadataOpener = MetadataStore.open,
             ) -> tuple[dict[str, Any], bool]:
    """One job on an executor through the local worker's code path.

    Returns (report dict, recovered): `recovered` when an earlier attempt had committed it.
    A retry (`attempt` > 0) whose job is still leased by a failed attempt waits until the
    lease expires or the job commits, then runs or reports it.
    """
    md = open_metadata(metadata_url)
    try:
        clock = SYSTEM_CLOCK
        deadline = clock.monotonic() + RETRY_WAIT_LEASES * config.lease_ms / 1000
        while True:
            done = _committed_report(md, spec.spec_id)
            if done is not None:
                return done, True
            expires = _leased_until(md, spec.spec_id)
            if expires is not None and attempt > 0 and clock.monotonic() < deadline:
                left_s = (expires - clock.now_ms()) / 1000
                clock.sleep(min(max(left_s, 0.0) + 0.05, RETRY_POLL_S))
                continue
            compactor = Compactor(open_store(store), md, config)
            return compactor.run_job(spec).as_dict(), False
    finally:
        md.close()


def _run_partition(
    rows: Iterator[tuple[StoreSpec, str, JobSpec, CompactorConfig, MetadataOpener]],
) -> Iterator[tuple[dict[str, Any], bool]]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = ctx.attemptNumber() if ctx is not None else 0
    for store, metadata_url, spec, config, open_metadata in rows:
        yield run_spec(store, metadata_url, spec, config, attempt=attempt,
                       open_metadata=open_metadata)


def summarize(reports: list[JobReport]) -> dict[str, int]:
    """Totals over job reports: jobs, committed, bytes in/out, GETs, PUTs."""
    return {
        "jobs": len(reports),
        "committed": sum(r.outcome == "committed" for r in reports),
        "bytes_in": sum(r.input_bytes for r in reports),
        "bytes_out": sum(r.output_bytes for r in reports),
        "gets": sum(r.requests.get("GET", 0) for r in reports),
        "puts": sum(r.requests.get("PUT", 0) for r in reports),
    }


def run_on_spark(store_url: str, metadata_url: str, *, master: str = DEFAULT_MASTER,
                 everything: bool = False, config: CompactorConfig | None = None,
                 session: Any = None, spark_conf: Mapping[str, str] | None = None,
                 open_metadata: MetadataOpener = MetadataStore.open) -> list[JobReport]:
    """Apply retention and plan on the driver, run each proposed job as one Spark task,
    collect garbage.

    `session`: an existing SparkSession (else one is created for `master` with
    `spark_conf`, e.g. `spark.executorEnv.AWS_PROFILE`).
    `open_metadata`: how the driver and each task open the metadata store (MetadataOpener).
    Returns one report per proposed job, in plan order. Raises SparkJobError when Spark
    gives up on a task (it raised on every attempt: the job is left to a later round).
    """
    config = config or CompactorConfig()
    where = StoreSpec.resolve(store_url)  # shipped to the tasks as resolved here
    store = open_store(where)
    md = open_metadata(metadata_url)
    try:
        driver = Compactor(store, md, config)
        driver.apply_retention()
        specs = driver.plan(everything=everything).jobs
        if not specs:
            log.info("no compaction job to run")
            return []
        spark = session or get_session(master, "silt-compact", **(spark_conf or {}))
        rdd = spark.sparkContext.parallelize(
            [(where, metadata_url, spec, config, open_metadata) for spec in specs],
            numSlices=len(specs))
        try:
            results: list[tuple[dict[str, Any], bool]] = (
                rdd.mapPartitions(_run_partition).collect())
        except Exception as exc:  # py4j's or pyspark's error, a whole stack trace long
            raise SparkJobError(f"Spark gave up on a compaction task: {first_error(exc)}"
                                ) from exc
        reports = []
        for raw, recovered in results:
            report = JobReport(**raw)
            reports.append(report)
            log.info("job %s: %s%s; %s files %d B -> %s files %d B; requests %s%s",
                     report.spec_id, report.outcome,
                     " (by an earlier task attempt)" if recovered else "",
                     report.input_files, report.input_bytes, report.output_files,
                     report.output_bytes, report.requests,
                     f"; {report.error}" if report.error else "")
        log.info("spark compaction summary: %s", summarize(reports))
        driver.collect_garbage()
        return reports
    finally:
        md.close()
