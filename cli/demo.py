"""`silt demo`: produce through an agent, read everything back, and say what happened."""

from __future__ import annotations

import time
from collections.abc import Callable

import click

from agent import Agent, Reader
from agent.producer import ProduceFuture
from metadata import MetadataStore
from objectstore import ObjectStore

from .context import Context, one_line_errors, pass_ctx


@click.command("demo")
@click.option("--records", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=1_000, show_default=True)
@pass_ctx
@one_line_errors
def demo(ctx: Context, records: int, partitions: int) -> None:
    """Run an end-to-end demo on the configured store and metadata and explain it."""
    ctx.open(create=True)
    run_demo(ctx.store, ctx.metadata, ctx.store_url, ctx.metadata_url,
             records=records, partitions=partitions, echo=click.echo)


def run_demo(
    store: ObjectStore,
    metadata: MetadataStore,
    store_url: str,
    metadata_url: str,
    *,
    records: int,
    partitions: int,
    echo: Callable[[str], None],
) -> None:
    """Produce `records` records over `partitions` partitions, consume them, verify."""
    run = time.strftime("%Y%m%d-%H%M%S")
    events = f"demo-events-{run}"
    state = f"demo-state-{run}"
    echo(f"siltstream demo  store={store_url}  metadata={metadata_url}")
    metadata.create_topic(events, partitions)
    metadata.create_topic(state, 4, {"cleanup.policy": "compact"})
    echo(f"created topic {events} ({partitions} partitions, cleanup.policy=delete)")
    echo(f"created topic {state} (4 partitions, cleanup.policy=compact)")

    before = store.counters()
    started = time.perf_counter()
    futures: list[tuple[int, bytes, ProduceFuture]] = []
    value = b"v" * 100
    with Agent(store, metadata) as agent:
        for i in range(records):
            p = i % partitions
            key = b"k%d" % i
            futures.append((p, key, agent.produce(events, p, key, value)))
        # A compacted topic: 20 keys updated 50 times each, then two deleted.
        for round_ in range(50):
            for k in range(20):
                agent.produce(state, k % 4, b"user-%d" % k, b"v%d" % round_)
        for k in (3, 7):
            agent.produce(state, k % 4, b"user-%d" % k, None)
    elapsed = time.perf_counter() - started
    for _, _, f in futures:
        f.result()  # raises if any flush failed
    used = store.counters() - before
    totals = agent.totals
    echo(
        f"produced {records + 1002} records in {elapsed:.2f}s through one agent:"
        f" {totals.flushes} flushes -> {totals.objects} objects"
        f" ({used.as_dict().get('PUT', 0)} PUT,"
        f" {used.as_dict().get('UploadPart', 0)} UploadPart), not one per partition"
    )
    if totals.objects:
        widest = max(r.partitions for r in agent.reports)  # the demo keeps every report
        echo(f"each object holds up to {widest} topic-partitions;"
             f" mean object size {totals.bytes // totals.objects:,} bytes")

    reader = Reader(store, metadata)
    got = 0
    expected_next = [0] * partitions
    for p in range(partitions):
        for rec in reader.read(events, p, 0):
            if rec.offset != expected_next[p] or rec.value != value:
                raise RuntimeError(f"demo verification failed at {events}/{p}@{rec.offset}")
            expected_next[p] += 1
            got += 1
    if got != records:
        raise RuntimeError(f"demo verification failed: produced {records}, read {got}")
    echo(f"consumed {got} records back: offsets 0..n-1 in every partition, values intact")
    from compactor import Compactor

    bytes_before = metadata.stats().as_dict()
    echo("")
    echo("compacting everything once (silt compact --once --all) ...")
    reports = Compactor(store, metadata).run_once(everything=True)
    for r in reports:
        gets = r.requests.get("GET", 0)
        st = r.stats
        echo(
            f"job {r.spec_id[:8]} {r.outcome}: {r.input_files} input objects"
            f" ({r.input_bytes:,} B) -> {r.output_files} objects ({r.output_bytes:,} B);"
            f" records {st['records_in']:,} -> {st['records_out']:,},"
            f" {st['duplicates_dropped']:,} duplicates removed;"
            f" {gets} GETs = {gets / max(r.input_files, 1):g} per input file"
            f" over {st['partitions']} partitions"
        )
    latest: dict[bytes | None, bytes | None] = {}
    count = 0
    for p in range(4):
        for rec in reader.read(state, p, 0):
            latest[rec.key] = rec.value
            count += 1
    live = sum(v is not None for v in latest.values())
    echo(f"compacted topic {state}: 1,002 records written, {count} left after compaction"
         f" ({live} live keys + {count - live} tombstones kept until delete.retention.ms)")
    got = sum(1 for p in range(partitions) for _ in reader.read(events, p, 0))
    if got != records:
        raise RuntimeError(f"delete-policy topic lost records: {got} != {records}")
    echo(f"delete-policy topic {events}: all {got:,} records still there, offsets unchanged")
    after = metadata.stats().as_dict()
    echo(f"live bytes: {sum(lv['bytes'] for lv in bytes_before['levels']):,} before,"
         f" {sum(lv['bytes'] for lv in after['levels']):,} after;"
         f" retired input objects are deleted after a 60 s grace period")
