"""Spark: compaction as Spark tasks (same results and GETs as the local compactor, retried
tasks never commit twice), and format("silt") reads and writes compared with what the
library itself reads and writes."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent import Agent, AgentConfig, Reader
from cli.main import cli
from clock import ManualClock
from compactor import Compactor, CompactorConfig, JobReport
from faults import AFTER_COMMIT, BEFORE_COMMIT, CrashOnce, UnreachableInTasks
from fileformat import FileLayout
from metadata import ChunkMeta, MetadataStore
from objectstore import open_store
from spark.compaction import run_on_spark, summarize
from spark.errors import SparkJobError, first_error
from tests.layouts import layout as file_layout

pytestmark = pytest.mark.spark

Dump = dict[tuple[str, int], list[tuple[Any, ...]]]
TOPICS = (("s", 3), ("e", 2))


def _urls(root: Path) -> tuple[str, str]:
    return f"file://{root}/objects", f"sqlite:///{root}/md.db"


def _populate(root: Path) -> tuple[str, str]:
    """3 agent flushes (3 files) over a compacted topic `s` (11 keys, 2 of them deleted in
    the last round) and a delete-policy topic `e` with null keys."""
    store_url, md_url = _urls(root)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("s", 3, {"cleanup.policy": "compact"})
    # The records carry 1970 timestamps: keep `e` out of retention (7 days by default).
    md.create_topic("e", 2, {"retention.ms": "-1"})
    store = open_store(store_url)
    for rnd in range(3):
        ts = 1_000 + rnd
        with Agent(store, md, AgentConfig(linger_ms=60_000), clock=ManualClock(ts)) as a:
            for i in range(90):
                key = b"k%d" % (i % 11)
                value = None if rnd == 2 and key in (b"k0", b"k4") else b"v%d-%d" % (rnd, i)
                a.produce("s", i % 3, key, value, (("h", b"%d" % i),))
                a.produce("e", i % 2, None, b"e%d" % i)
    md.close()
    return store_url, md_url


def _dump(store_url: str, md_url: str) -> Dump:
    md = MetadataStore.open(md_url, create=True)
    r = Reader(open_store(store_url), md)
    out = {(t, p): [(x.offset, x.key, x.value, x.headers) for x in r.read(t, p, 0)]
           for t, n in TOPICS for p in range(n)}
    md.close()
    return out


def _compacted(before: Dump) -> Dump:
    """What a full compaction leaves: `e` unchanged; the latest record per key of `s` (its
    tombstones are kept: delete.retention.ms has not passed)."""
    out = dict(before)
    for p in range(3):
        latest = {k: (o, k, v, h) for o, k, v, h in before[("s", p)]}
        out[("s", p)] = sorted(latest.values())
    return out


def _committed_jobs(md_url: str) -> list[Any]:
    md = MetadataStore.open(md_url, create=True)
    try:
        return md.list_jobs(state="committed")
    finally:
        md.close()


def test_jobspecs_and_config_pickle(tmp_path: Path) -> None:
    store_url, md_url = _populate(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    specs = Compactor(open_store(store_url), md).plan(everything=True).jobs
    md.close()
    assert specs
    assert pickle.loads(pickle.dumps(specs)) == specs
    config = CompactorConfig(lease_ms=5_000)
    assert pickle.loads(pickle.dumps(config)) == config


def test_spark_compaction_equals_local(spark: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    store_a, md_a = _populate(a)
    shutil.copytree(a, b)
    store_b, md_b = _urls(b)
    md = MetadataStore.open(md_a, create=True)
    (local,) = Compactor(open_store(store_a), md).run_once(everything=True)
    md.close()
    reports = run_on_spark(store_b, md_b, everything=True, session=spark)
    assert all(isinstance(r, JobReport) for r in reports)
    assert [r.outcome for r in reports] == ["committed"]
    (remote,) = reports
    assert remote.requests["GET"] == local.requests["GET"] == 2 * local.input_files == 6
    assert (remote.input_files, remote.output_files, remote.stats) == \
        (local.input_files, local.output_files, local.stats)
    assert summarize(reports)["gets"] == 6
    after = _dump(store_b, md_b)
    assert after == _dump(store_a, md_a)  # same offsets, keys, values, headers
    assert after == _compacted(_dump(store_a, md_a))
    assert len(_committed_jobs(md_b)) == 1


def test_task_crashing_after_merge_before_commit_is_taken_over(
        spark: Any, tmp_path: Path) -> None:
    store_url, md_url = _populate(tmp_path)
    before = _dump(store_url, md_url)
    marker = tmp_path / "crashed-once"
    # Attempt 1 merges, uploads its outputs and dies holding the lease; Spark retries the
    # task; attempt 2 waits for the lease to expire, takes the job over (fence 2), commits.
    reports = run_on_spark(store_url, md_url, everything=True, session=spark,
                           config=CompactorConfig(lease_ms=1_500),
                           open_metadata=CrashOnce(BEFORE_COMMIT, marker))
    assert marker.read_text() == "before_commit"
    assert [r.outcome for r in reports] == ["committed"]
    assert reports[0].fence == 2
    (job,) = _committed_jobs(md_url)
    assert (job.fence, job.attempts) == (2, 2)
    assert _dump(store_url, md_url) == _compacted(before)
    md = MetadataStore.open(md_url, create=True)
    live = [f for f in md.snapshot().files if f.state == "live"]
    stranded = [f for f in md.files_to_gc(2**62) if f.state == "pending"]
    md.close()
    assert len(live) == reports[0].output_files == 2  # attempt 2's outputs only
    assert len(stranded) == 2  # attempt 1's outputs: never visible, GC deletes them


def test_task_crashing_after_commit_does_not_commit_twice(
        spark: Any, tmp_path: Path) -> None:
    store_url, md_url = _populate(tmp_path)
    before = _dump(store_url, md_url)
    marker = tmp_path / "crashed-once"
    reports = run_on_spark(store_url, md_url, everything=True, session=spark,
                           open_metadata=CrashOnce(AFTER_COMMIT, marker))
    assert marker.read_text() == "after_commit"  # attempt 1 committed, then its task died
    # The retry found the job committed and reported what attempt 1 stored with it.
    assert [r.outcome for r in reports] == ["committed"]
    assert reports[0].requests["GET"] == 6
    (job,) = _committed_jobs(md_url)
    assert (job.fence, job.attempts, job.id) == (1, 1, reports[0].job_id)
    assert _dump(store_url, md_url) == _compacted(before)


def test_task_failing_every_attempt_raises_one_line(spark: Any, tmp_path: Path) -> None:
    """A task that raises on every attempt (here: the metadata database is unreachable from
    executors): once Spark gives up, run_on_spark raises SparkJobError with the task's error
    in one line; nothing was committed."""
    store_url, md_url = _populate(tmp_path)
    before = _dump(store_url, md_url)
    with pytest.raises(SparkJobError) as err:
        run_on_spark(store_url, md_url, everything=True, session=spark,
                     open_metadata=UnreachableInTasks())
    assert str(err.value) == ("Spark gave up on a compaction task: ConnectionRefusedError:"
                              f" metadata {md_url}: unreachable from this executor (injected)")
    assert _committed_jobs(md_url) == []
    assert _dump(store_url, md_url) == before


def test_first_error_finds_the_python_error_in_a_jvm_trace() -> None:
    jvm = ("An error occurred while calling o1.collect.\n: org.apache.spark.SparkException:"
           " Job aborted due to stage failure: Task 0 failed 4 times, most recent failure:"
           " org.apache.spark.api.python.PythonException: Traceback (most recent call"
           " last):\n  File \"worker.py\", line 1, in main\n    raise PermissionError(x)\n"
           "PermissionError: get s3://b/k: Unable to locate credentials\n\n"
           "\tat org.apache.spark.api.python.BasePythonRunner.handle(Runner.scala:1)\n")
    assert first_error(RuntimeError(jvm)) == (
        "PermissionError: get s3://b/k: Unable to locate credentials")
    assert first_error(RuntimeError("one\ntwo")) == "one"
    assert first_error(RuntimeError()) == "RuntimeError"


def test_read_equals_consume_and_latest_per_key(spark: Any, tmp_path: Path) -> None:
    store_url, md_url = _populate(tmp_path)
    expected = _dump(store_url, md_url)
    opts = {"store": store_url, "metadata": md_url}
    df = spark.read.format("silt").options(topic="s", includeHeaders="true", **opts).load()
    assert df.rdd.getNumPartitions() == 1  # one task: one ranged GET per object (3)
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
        "headers"]  # Spark's Kafka source schema
    rows = sorted((r.partition, r.offset, bytes(r.key),
                   None if r.value is None else bytes(r.value),
                   tuple((h.key, bytes(h.value)) for h in r.headers))
                  for r in df.collect())
    want = sorted((p, o, k, v, h) for (t, p), recs in expected.items() if t == "s"
                  for o, k, v, h in recs)
    assert rows == want
    latest = spark.read.format("silt").options(topic="s", latest_per_key="true", **opts).load()
    got = {(r.partition, bytes(r.key)): bytes(r.value) for r in latest.collect()}
    model: dict[tuple[int, bytes], bytes | None] = {}
    for p, _o, k, v, _h in want:
        model[(p, k)] = v
    assert got == {pk: v for pk, v in model.items() if v is not None}
    assert not any(k in (b"k0", b"k4") for _, k in got)  # tombstoned keys are absent
    some = spark.read.format("silt").options(topic="e", partitions="1", start_offset="5",
                                             end_offset="9", **opts).load()
    assert sorted(r.offset for r in some.collect()) == [5, 6, 7, 8]
    e = spark.read.format("silt").options(topic="e", **opts).load()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in e.collect()) == sorted(
        (p, o, v) for (t, p), recs in expected.items() if t == "e" for o, _k, v, _h in recs)


def test_write_then_consume_every_row_once(spark: Any, tmp_path: Path) -> None:
    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("w", 4)
    rows = [(f"k{i}", f"v{i}", i % 4) for i in range(200)]
    df = spark.createDataFrame(rows, "key string, value string, partition int").repartition(3)
    df.write.format("silt").options(topic="w", store=store_url, metadata=md_url) \
        .mode("append").save()
    r = Reader(open_store(store_url), md)
    got = sorted((x.key, x.value) for p in range(4) for x in r.read("w", p, 0))
    assert got == sorted((k.encode(), v.encode()) for k, v, _ in rows)
    for p in range(4):
        assert [x.offset for x in r.read("w", p, 0)] == list(range(50))
    assert md.stats().as_dict()["levels"][0]["files"] <= 3  # one object per task
    md.close()


def test_write_binary_to_compacted_topic_then_compact(spark: Any, tmp_path: Path) -> None:
    """No partition column (Kafka's partitioner), binary keys, headers, keyed key hashes:
    the compactor then dedupes what Spark wrote."""
    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("c", 3, {"cleanup.policy": "compact"})
    schema = "key binary, value binary, headers map<string,binary>"
    for rnd in range(2):
        rows = [(b"key-%d" % i, b"r%d-%d" % (rnd, i), {"n": b"%d" % i}) for i in range(30)]
        spark.createDataFrame(rows, schema).repartition(2).write.format("silt") \
            .options(topic="c", store=store_url, metadata=md_url).mode("append").save()
    r = Reader(open_store(store_url), md)
    assert sum(1 for p in range(3) for _ in r.read("c", p, 0)) == 60
    Compactor(open_store(store_url), md).run_once(everything=True)
    got = {x.key: (x.value, x.headers) for p in range(3) for x in r.read("c", p, 0)}
    assert sum(1 for p in range(3) for _ in r.read("c", p, 0)) == 30
    assert got == {b"key-%d" % i: (b"r1-%d" % i, (("n", b"%d" % i),)) for i in range(30)}
    md.close()


def test_failed_write_job_leaves_nothing_visible(spark: Any, tmp_path: Path) -> None:
    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("w", 2)
    df = spark.createDataFrame([(f"k{i}", "v", 9 if i == 7 else 0) for i in range(20)],
                               "key string, value string, partition int").repartition(2)
    with pytest.raises(Exception, match="partition 9 out of range"):
        df.write.format("silt").options(topic="w", store=store_url, metadata=md_url) \
            .mode("append").save()
    assert all(p.next_offset == 0 for p in md.partitions("w"))
    assert md.snapshot().files == ()
    assert all(f.state in ("abandoned", "pending") for f in md.files_to_gc(2**62))
    assert list(Reader(open_store(store_url), md).read("w", 0, 0)) == []
    md.close()


def test_commit_files_is_all_or_nothing(tmp_path: Path) -> None:
    _, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("t", 2)
    from metadata.errors import FileStateError

    def chunk(p: int, n: int) -> ChunkMeta:
        return ChunkMeta(topic="t", partition=p, offset_span=n, record_count=n, data_pos=0,
                         data_len=10, hash_pos=0, hash_count=0, batch_count=1,
                         min_timestamp=0, max_timestamp=0, tombstone_count=0, frame_crc=0)

    def layout(*chunks: ChunkMeta) -> FileLayout:
        return file_layout(chunks, size=100, data_offset=0, data_length=10, meta_offset=10,
                           meta_length=10)

    a, b, c = (md.register_pending_file(f"o{i}") for i in range(3))
    md.abandon_file(c)
    with pytest.raises(FileStateError):
        md.commit_files([(a, layout(chunk(0, 3))), (c, layout(chunk(0, 2)))])
    assert [p.next_offset for p in md.partitions("t")] == [0, 0]
    assert md.get_file(a).state == "pending"
    bases = md.commit_files([(a, layout(chunk(0, 3), chunk(1, 1))), (b, layout(chunk(0, 2)))])
    assert bases == [{("t", 0): 0, ("t", 1): 0}, {("t", 0): 3}]
    assert [p.next_offset for p in md.partitions("t")] == [5, 1]
    md.close()


def test_cli_compact_engine_spark(spark: Any, tmp_path: Path) -> None:
    store_url, md_url = _populate(tmp_path)
    before = _dump(store_url, md_url)
    env = {"SILT_STORE": store_url, "SILT_METADATA": md_url}
    runner = CliRunner()
    res = runner.invoke(cli, ["compact", "--once", "--all", "--engine", "spark", "--master",
                              "local[2]", "--json"], env=env, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    (report,) = json.loads(res.output)
    assert (report["outcome"], report["requests"]["GET"]) == ("committed", 6)
    assert _dump(store_url, md_url) == _compacted(before)
    res = runner.invoke(cli, ["compact", "--engine", "spark"], env=env)
    assert res.exit_code == 1 and "--once" in res.output


def test_read_decodes_every_client_codec(spark: Any, tmp_path: Path) -> None:
    """Batches as clients compress them (gzip, xerial and raw snappy, lz4, zstd) read through
    format("silt") exactly as the library's Reader reads them."""
    from tests.fileformat.client_batches import CLIENT_BATCHES, sample_records

    store_url, md_url = _urls(tmp_path)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("z", 1)
    store = open_store(store_url)
    with Agent(store, md, AgentConfig(linger_ms=60_000), clock=ManualClock()) as a:
        for i, (name, build, codec) in enumerate(CLIENT_BATCHES):  # one producer's batches
            a.produce_batch("z", 0, build(sample_records(20, tag=name.encode()), codec, 20 * i))
    want = [(r.offset, r.key, r.value) for r in Reader(store, md).read("z", 0, 0)]
    md.close()
    assert len(want) == 20 * len(CLIENT_BATCHES)
    df = spark.read.format("silt").options(topic="z", store=store_url, metadata=md_url).load()
    got = sorted((r.offset, bytes(r.key), bytes(r.value)) for r in df.collect())
    assert got == want
