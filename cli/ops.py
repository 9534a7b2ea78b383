"""One-off operations on a cluster's store and metadata: `silt init`, `stats`, `retention`,
`gc` and `doctor` (what the compactor's rounds and timers also do, run now)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import click

from compactor.config import FILE_DELETE_DELAY_MS, CompactorConfig

from .cluster import open_cluster
from .context import Context, one_line_errors, pass_ctx, setting_default
from .output import Output, columns, json_option

# What `silt stats` says of each file state.
STATE_NOTES = {
    "pending": "being written (a crashed write's stay until GC)",
    "retired": "replaced by compaction or retention; deleted after the GC grace period",
    "abandoned": "a failed write; deleted by GC",
    "deleting": "being deleted by GC",
}


def _init_text(report: dict[str, Any]) -> Iterator[str]:
    created = report["bucket_created"]
    if created is not None:
        yield f"bucket {'created' if created else 'exists already'}"
    marker = "marker written" if report["marker_written"] else "marker present"
    yield (f"cluster {report['cluster_id']}: store {report['store']} ({marker}),"
           f" metadata {report['metadata']}")


@click.command("init")
@click.option("--create-bucket", is_flag=True, help="Create the s3:// store's bucket first.")
@json_option()
@pass_ctx
@one_line_errors
def init(ctx: Context, create_bucket: bool, out: Output) -> None:
    """Create the metadata (schema) and the store's cluster marker; idempotent.

    The first write command (topics create, produce, agent, compactor, up, demo) does the
    same; read-only commands never create anything.
    """
    from .cluster import create_bucket as make_bucket
    from .cluster import init_report

    created = make_bucket(ctx.store_url) if create_bucket else None
    cluster = open_cluster(ctx.settings, create=True)
    cluster.metadata.close()
    out.result(init_report(cluster, ctx.store_url, created), _init_text)


def _stats_text(data: dict[str, Any]) -> Iterator[str]:
    from metadata import schema as ms

    yield "level  files  bytes  segments"
    for row in data["levels"]:
        yield f"{row['level']:>5}  {row['files']:>5}  {row['bytes']:>5}  {row['segments']:>8}"
    files, size = data["files_by_state"], data["bytes_by_state"]
    rows = [["state", "files", "bytes", ""]]
    for state in ms.FILE_STATES:
        if state == ms.FILE_DELETED or not files.get(state):
            continue  # deleted files are gone from the store
        rows.append([state, str(files[state]), str(size[state]), STATE_NOTES.get(state, "")])
    for line in columns(rows, indent=""):
        yield line.rstrip()
    held = sum(b for state, b in size.items() if state != ms.FILE_DELETED)
    yield (f"in the store: {held} bytes (live {size.get(ms.FILE_LIVE, 0)},"
           f" awaiting GC {held - size.get(ms.FILE_LIVE, 0)})")


@click.command("stats")
@json_option()
@pass_ctx
@one_line_errors
def stats(ctx: Context, out: Output) -> None:
    """Files, bytes and segments per level (live data); files and bytes per state, so
    what is retired and awaiting GC shows too: live + the states awaiting GC is what the
    store holds."""
    out.result(ctx.metadata.stats().as_dict(), _stats_text)


def _retention_text(result: dict[str, Any]) -> Iterator[str]:
    rows = result["partitions"]
    if not rows:
        yield "nothing past retention"
    for r in rows:
        yield (f"{r['topic']}/{r['partition']}: log start -> {r['log_start_offset']} "
               f"({r['segments']} segments, {r['records']} records, {r['bytes']} bytes)")
    if result["retired_files"]:
        yield f"{len(result['retired_files'])} files retired (deleted after the GC grace)"


@click.command("retention")
@json_option()
@pass_ctx
@one_line_errors
def retention(ctx: Context, out: Output) -> None:
    """Apply retention.ms / retention.bytes now (every compaction round does this first)."""
    result = ctx.metadata.apply_retention()
    out.result({"partitions": [asdict(c) for c in result.changes],
                "retired_files": list(result.retired_file_ids)}, _retention_text)


@click.command("gc")
@click.option("--grace-ms", type=click.IntRange(min=0), default=None,
              show_default=setting_default(CompactorConfig, FILE_DELETE_DELAY_MS, unit=" ms"),
              help="Delete files retired at least this long ago (0: all of them now).")
@json_option()
@pass_ctx
@one_line_errors
def gc(ctx: Context, grace_ms: int | None, out: Output) -> None:
    """Collect garbage now, as the compactor does every compactor.gc.interval.ms.

    Deletes the objects of files retired (by compaction or retention) or abandoned at least
    the grace period ago; uploads still pending are left for compactor.lease.ms at least,
    so writes under way never fail. Aborts the store's unfinished uploads (S3 multipart
    uploads a killed process left) begun longer ago than that. Then prunes old history
    rows from the metadata.
    """
    from compactor import Compactor

    config = ctx.load({f"compactor.{FILE_DELETE_DELAY_MS}": grace_ms}).compactor
    comp = Compactor(ctx.store, ctx.metadata, config)
    report = comp.collect_garbage(sweep_uploads=True)
    waiting = len(ctx.metadata.files_to_gc(comp.clock.now_ms()))

    def text(done: dict[str, Any]) -> Iterator[str]:
        yield (f"deleted {done['deleted']} objects; {waiting} files wait for their grace"
               f" period ({config.grace_ms:,} ms) or lease ({config.lease_ms:,} ms);"
               f" aborted {report.uploads_aborted} unfinished uploads")

    out.result({"deleted": len(report.deleted), "keys": report.deleted, "waiting": waiting,
                "grace_ms": config.grace_ms, "uploads_aborted": report.uploads_aborted}, text)


@click.command("doctor")
@click.option("--deep", is_flag=True,
              help="Also read every live object: every batch CRC, the index (two GETs each).")
@click.option("--fix", is_flag=True,
              help="Delete orphan objects older than compactor.file.delete.delay.ms.")
@json_option()
@pass_ctx
@one_line_errors
def doctor(ctx: Context, deep: bool, fix: bool, out: Output) -> None:
    """Check the object store against the metadata; exit 1 if anything is wrong.

    Live objects missing or of the wrong size, orphan objects, pending uploads older than
    compactor.lease.ms, live segments in files that are not live; --deep: corrupt objects.
    """
    from compactor.doctor import doctor as check

    report = check(ctx.store, ctx.metadata, ctx.settings.compactor, deep=deep, fix=fix)
    out.result(report.as_dict(), lambda _: report.lines())
    if not report.ok:
        sys.exit(1)
