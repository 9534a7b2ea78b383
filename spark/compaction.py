"""Compaction on Spark executors: the planner runs on the driver, each job is one task.

A task opens the store and the metadata store from their URLs and calls the very same
`Compactor.run_job(spec)` as a local worker. Spark may retry a failed task or run a
speculative copy: the job lease and its fencing token make a second attempt either finish
the same job (after the first attempt's lease expired or was released) or lose cleanly;
an attempt of a job that already committed reports `already_committed` and commits nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

from compactor import Compactor
from metadata import MetadataStore
from objectstore import open_store
from planner import JobSpec

from .session import get_session

log = logging.getLogger(__name__)

# Tests: a path; the first task attempt that finds no file there creates it and fails
# after its job committed (simulating a task whose result was lost).
ENV_FAIL_ONCE_AFTER_COMMIT = "SILT_SPARK_FAIL_ONCE_AFTER_COMMIT"


def run_spec(store_url: str, metadata_url: str, spec: JobSpec,
             fail_marker: str | None = None) -> dict[str, Any]:
    """One job on an executor, through the local worker's code path."""
    md = MetadataStore.open(metadata_url)
    try:
        done = [j for j in md.list_jobs(state="committed") if j.spec_id == spec.spec_id]
        if done:
            return {"spec_id": spec.spec_id, "outcome": "already_committed",
                    "job_id": done[-1].id, "requests": {}, "stats": {}}
        report = Compactor(open_store(store_url), md).run_job(spec).as_dict()
    finally:
        md.close()
    marker = fail_marker
    if marker and report["outcome"] == "committed" and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(spec.spec_id)
        raise RuntimeError("injected task failure after commit")
    return report


def _run_partition(
    rows: Iterator[tuple[str, str, JobSpec, str | None]],
) -> Iterator[dict[str, Any]]:
    for store_url, metadata_url, spec, marker in rows:
        yield run_spec(store_url, metadata_url, spec, marker)


def run_on_spark(store_url: str, metadata_url: str, *, master: str | None = None,
                 everything: bool = False, session: Any = None) -> list[dict[str, Any]]:
    """Plan on the driver, run each proposed job as one Spark task; returns job reports."""
    md = MetadataStore.open(metadata_url)
    try:
        specs = Compactor(open_store(store_url), md).plan(everything=everything).jobs
    finally:
        md.close()
    if not specs:
        log.info("no compaction job to run")
        return []
    spark = session or get_session(master, "silt-compact")
    rdd = spark.sparkContext.parallelize(
        [(store_url, metadata_url, spec, os.environ.get(ENV_FAIL_ONCE_AFTER_COMMIT))
         for spec in specs], numSlices=len(specs))
    reports: list[dict[str, Any]] = rdd.mapPartitions(_run_partition).collect()
    for r in reports:
        log.info("job %s: %s %s", r["spec_id"], r["outcome"], r.get("stats"))
    summary = {
        "jobs": len(reports),
        "committed": sum(r["outcome"] == "committed" for r in reports),
        "bytes_in": sum(r.get("input_bytes", 0) for r in reports),
        "bytes_out": sum(r.get("output_bytes", 0) for r in reports),
        "gets": sum(r.get("requests", {}).get("GET", 0) for r in reports),
        "puts": sum(r.get("requests", {}).get("PUT", 0) for r in reports),
    }
    log.info("spark compaction summary: %s", summary)
    return reports
