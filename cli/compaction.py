"""`silt plan` and `silt compact`: the compaction jobs due now, and running them (here or
as Spark tasks); without --once, `compact` is the `silt compactor` service."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict
from datetime import datetime
from typing import Any

import click

from compactor.config import MEMORY_BUDGET, CompactorConfig

from .context import MIB, Context, one_line_errors, parse_configs, pass_ctx, setting_default
from .errors import CommandFailed
from .logs import configure as configure_logging
from .output import Output, json_option
from .services import serve_compactor


def _plan_text(plan: dict[str, Any]) -> Iterator[str]:
    for job in plan["jobs"]:
        yield f"job {job['spec_id']}: {job['trigger']}: {job['reason']}"
        yield (f"  files {job['input_files']} ({job['input_bytes']:,} bytes) -> "
               f"L{job['output_level']}; {job['compacted_partitions']} compacted partitions"
               f" ({job['whole_log_partitions']} whole-log)")
    if not plan["jobs"]:
        yield "no job to run now"
    for line in plan["waiting"]:
        yield f"waiting: {line}"
    change = plan["next_change"]
    if change is not None:
        at = datetime.fromtimestamp(change["at_ms"] / 1000).strftime("%H:%M:%S")
        yield (f"changes: at {at} (in {(change['at_ms'] - plan['now_ms']) / 1000:.1f} s)"
               f" {change['reason']}")
    for c in plan["retention_due"]:
        yield (f"retention due: {c['topic']}/{c['partition']} log start ->"
               f" {c['log_start_offset']} ({c['segments']} segments, {c['records']} records,"
               f" {c['bytes']} bytes); compact --once applies it before planning")


@click.command("plan")
@json_option()
@click.option("--all", "everything", is_flag=True, help="Ignore triggers: compact everything.")
@pass_ctx
@one_line_errors
def plan(ctx: Context, out: Output, everything: bool) -> None:
    """Show the compaction jobs `silt compact --once` would run now, and what it waits for.

    Also when the plan next changes with no new data (an age or lag threshold passing:
    a later `compact --once` then runs other jobs) and what retention is due (a round
    applies it before planning, which can change the jobs).
    """
    from compactor import Compactor
    from planner import describe, next_change, propose, propose_all

    comp = Compactor(ctx.store, ctx.metadata, ctx.settings.compactor)
    config = ctx.settings.compactor.planner
    _, snap = comp.snapshot()
    now = comp.clock.now_ms()  # one instant for the plan and the next change
    doc = describe((propose_all if everything else propose)(snap, now, config))
    change = None if everything else next_change(snap, now, config)
    doc["now_ms"] = now
    doc["next_change"] = None if change is None else {"at_ms": change.at_ms,
                                                      "reason": change.reason}
    doc["retention_due"] = [asdict(c) for c in ctx.metadata.retention_due()]
    out.result(doc, _plan_text)


def _report_lines(reports: list[Any]) -> Iterator[str]:
    for r in reports:
        st = r.stats
        yield (
            f"job {r.spec_id} {r.outcome}: {r.input_files} files {r.input_bytes:,} B ->"
            f" {r.output_files} files {r.output_bytes:,} B; records {st.get('records_in', 0)}"
            f" -> {st.get('records_out', 0)} (duplicates {st.get('duplicates_dropped', 0)},"
            f" tombstones {st.get('tombstones_dropped', 0)} dropped); requests {r.requests};"
            f" {r.duration_s:.2f}s" + (f"; {r.error}" if r.error else "")
        )
    if not reports:
        yield "no job to run now"


@click.command("compact")
@click.option("--once", is_flag=True, help="Run the jobs proposed now and exit.")
@click.option("--all", "everything", is_flag=True,
              help="Ignore the triggers and compact everything that can be, fully.")
@json_option()
@click.option("--memory", "memory_mib", type=click.IntRange(min=1), default=None,
              show_default=setting_default(CompactorConfig, MEMORY_BUDGET, MIB, " MiB"),
              help="Offset-map memory budget per job, MiB.")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local",
              show_default=True, help="Run jobs here, or as Spark tasks (siltstream[spark]).")
@click.option("--master", default=None, help="Spark master URL, e.g. local[2] (--engine spark).")
@click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="Spark setting for --engine spark, e.g. spark.executor.memory=2g or"
                   " spark.executorEnv.AWS_PROFILE=silt. Repeatable.")
@pass_ctx
@one_line_errors
def compact(ctx: Context, once: bool, everything: bool, out: Output, memory_mib: int | None,
            engine: str, master: str | None, spark_conf: tuple[str, ...]) -> None:
    """Run compaction jobs (`--once`); without --once, same as `silt compactor`.

    With --once, exits 1 if any job failed, naming the first failure on stderr.
    """
    from compactor import Compactor

    ignored = [flag for flag, given in (("--all", everything), ("--json", out.json)) if given]
    if not once and ignored:
        raise click.UsageError(f"{' and '.join(ignored)} would be ignored without --once"
                               " (compact then runs the worker loop, as silt compactor)")
    spark_only = [flag for flag, given in (("--master", master is not None),
                                           ("--spark-conf", bool(spark_conf))) if given]
    if spark_only and engine != "spark":
        verb = "needs" if len(spark_only) == 1 else "need"
        raise click.UsageError(f"{' and '.join(spark_only)} {verb} --engine spark")
    ctx.open(create=not once)
    memory = None if memory_mib is None else memory_mib * MIB
    config = ctx.load({f"compactor.{MEMORY_BUDGET}": memory}).compactor
    if engine == "spark":
        if not once:
            raise ValueError("--engine spark runs one round of jobs: add --once")
        try:
            from spark.compaction import DEFAULT_MASTER, run_on_spark, summarize
            from spark.errors import SparkJobError
        except ImportError as exc:
            raise ValueError("--engine spark needs pyspark: pip install 'siltstream[spark]'"
                             ) from exc
        try:
            reports = run_on_spark(ctx.store_url, ctx.metadata_url,
                                   master=master or DEFAULT_MASTER, everything=everything,
                                   config=config,
                                   spark_conf=parse_configs(spark_conf, "--spark-conf"))
        except SparkJobError as exc:
            raise CommandFailed(str(exc)) from exc

        def text(_: object) -> Iterator[str]:
            yield from _report_lines(reports)
            if reports:
                yield "summary: " + ", ".join(f"{k} {v:,}" for k, v in summarize(reports).items())

        out.result([r.as_dict() for r in reports], text)
    elif not once:
        configure_logging("text", logging.INFO)
        serve_compactor(ctx, config)
        return
    else:
        reports = Compactor(ctx.store, ctx.metadata, config).run_once(everything=everything)
        out.result([r.as_dict() for r in reports], lambda _: _report_lines(reports))
    failed = [r for r in reports if r.outcome == "failed"]
    if failed:
        first = str(failed[0].error).splitlines()[0] if failed[0].error else "no error recorded"
        raise CommandFailed(f"{len(failed)} of {len(reports)} compaction jobs failed; first:"
                            f" job {failed[0].spec_id}: {first}")
