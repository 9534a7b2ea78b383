"""Spark: compaction as Spark tasks (same results and GETs as the local compactor), and
format("silt") reads and writes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agent import Agent, AgentConfig, Reader
from compactor import Compactor
from metadata import MetadataStore
from objectstore import open_store
from spark.compaction import ENV_FAIL_ONCE_AFTER_COMMIT, run_on_spark

pytestmark = pytest.mark.spark


def _populate(root: Path) -> tuple[str, str]:
    store_url, md_url = f"file://{root}/objects", f"sqlite:///{root}/md.db"
    md = MetadataStore.open(md_url)
    md.create_topic("s", 3, {"cleanup.policy": "compact"})
    md.create_topic("e", 2)
    store = open_store(store_url)
    for rnd in range(3):
        ts = 1_000 + rnd
        with Agent(store, md, AgentConfig(linger_ms=60_000), clock=lambda ts=ts: ts) as a:
            for i in range(90):
                a.produce("s", i % 3, b"k%d" % (i % 11), b"v%d-%d" % (rnd, i),
                          (("h", b"%d" % i),))
                a.produce("e", i % 2, None, b"e%d" % i)
    md.close()
    return store_url, md_url


def _dump(store_url: str, md_url: str) -> dict[tuple[str, int], list[tuple[Any, ...]]]:
    md = MetadataStore.open(md_url)
    r = Reader(open_store(store_url), md)
    out = {(t, p): [(x.offset, x.key, x.value, x.headers) for x in r.read(t, p, 0)]
           for t, n in (("s", 3), ("e", 2)) for p in range(n)}
    md.close()
    return out


def test_spark_compaction_equals_local(spark: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    store_a, md_a = _populate(a)
    shutil.copytree(a, b)
    store_b, md_b = f"file://{b}/objects", f"sqlite:///{b}/md.db"
    md = MetadataStore.open(md_a)
    (local,) = Compactor(open_store(store_a), md).run_once(everything=True)
    md.close()
    reports = run_on_spark(store_b, md_b, everything=True, session=spark)
    assert [r["outcome"] for r in reports] == ["committed"]
    assert reports[0]["requests"]["GET"] == local.requests["GET"] == 2 * local.input_files
    assert _dump(store_a, md_a) == _dump(store_b, md_b)


def test_task_failing_once_does_not_double_commit(spark: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store_url, md_url = _populate(tmp_path)
    before = _dump(store_url, md_url)
    marker = tmp_path / "failed-once"
    monkeypatch.setenv(ENV_FAIL_ONCE_AFTER_COMMIT, str(marker))
    reports = run_on_spark(store_url, md_url, everything=True, session=spark)
    assert marker.exists()  # the first attempt committed, then its task failed
    assert [r["outcome"] for r in reports] == ["already_committed"]  # the retry
    md = MetadataStore.open(md_url)
    assert len(md.list_jobs(state="committed")) == 1
    md.close()
    after = _dump(store_url, md_url)
    assert after[("e", 0)] == before[("e", 0)]
    for p in range(3):
        latest = {k: (o, k, v, h) for o, k, v, h in before[("s", p)]}
        assert sorted(after[("s", p)]) == sorted(latest.values())


def test_read_equals_consume_and_latest_per_key(spark: Any, tmp_path: Path) -> None:
    store_url, md_url = _populate(tmp_path)
    expected = _dump(store_url, md_url)
    opts = {"store": store_url, "metadata": md_url}
    df = spark.read.format("silt").options(topic="s", **opts).load()
    rows = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value),
                   tuple(sorted((k, bytes(v)) for k, v in r.headers.items())))
                  for r in df.collect())
    want = sorted((p, o, k, v, h) for (t, p), recs in expected.items() if t == "s"
                  for o, k, v, h in recs)
    assert rows == want
    latest = spark.read.format("silt").options(topic="s", latest_per_key="true", **opts).load()
    got = {(r.partition, bytes(r.key)): bytes(r.value) for r in latest.collect()}
    model: dict[tuple[int, bytes], bytes] = {}
    for p, _o, k, v, _h in want:
        model[(p, k)] = v
    assert got == model
    some = spark.read.format("silt").options(topic="e", partitions="1", start_offset="5",
                                             end_offset="9", **opts).load()
    assert sorted(r.offset for r in some.collect()) == [5, 6, 7, 8]


def test_write_then_consume_every_row_once(spark: Any, tmp_path: Path) -> None:
    store_url, md_url = f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db"
    md = MetadataStore.open(md_url)
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


def test_failed_write_job_leaves_nothing_visible(spark: Any, tmp_path: Path) -> None:
    store_url, md_url = f"file://{tmp_path}/objects", f"sqlite:///{tmp_path}/md.db"
    md = MetadataStore.open(md_url)
    md.create_topic("w", 2)
    df = spark.createDataFrame([(f"k{i}", "v", 9 if i == 7 else 0) for i in range(20)],
                               "key string, value string, partition int").repartition(2)
    with pytest.raises(Exception, match="partition 9 out of range"):
        df.write.format("silt").options(topic="w", store=store_url, metadata=md_url) \
            .mode("append").save()
    assert all(p.next_offset == 0 for p in md.partitions("w"))
    assert all(f.state in ("abandoned", "pending") for f in md.files_to_gc(2**62))
    md.close()
    assert os.environ.get(ENV_FAIL_ONCE_AFTER_COMMIT) is None
