"""Spark on a real cluster: a standalone master and one worker started with `spark-class`
from the pyspark package, the worker WITHOUT any AWS variable, moto S3 and PostgreSQL.

The driver ships the store's endpoint, region and addressing style to the executors
(`objectstore.StoreSpec`); credentials reach them only as a user gives them explicitly
(`spark.executorEnv.*`). Without them `silt compact --engine spark` fails its job and says
so in one line with exit 1; with them compaction and format("silt") run on the executors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent import Agent, AgentConfig, Reader
from clock import ManualClock
from harness.agent_process import free_port
from metadata import MetadataStore
from objectstore import open_store

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180  # JVMs start slowly on a loaded machine
APP_TIMEOUT_S = 600  # a job that never gets an executor hangs: fail instead
WORKER_MEMORY = "512m"
# Short-lived JVMs on a small machine: the quick JIT tier only, one GC thread.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_CONF = {
    "spark.executor.memory": "512m",  # Spark's default (1g) exceeds the worker
    "spark.driver.extraJavaOptions": FAST_JVM,
    "spark.executor.extraJavaOptions": FAST_JVM,
}


@dataclass
class Cluster:
    master_url: str
    logs: Path


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any AWS variable; executors import this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    path = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env.update(PYTHONPATH=os.pathsep.join(path), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, **extra)
    return env


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 512 MiB), niced; the worker's
    environment holds no AWS variable."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    logs = tmp_path_factory.mktemp("spark-cluster")
    port, ui_port = free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    # No REST submission server: it would take the fixed port 6066.
    env = _clean_env(SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                     SPARK_DAEMON_MEMORY="256m", SPARK_DAEMON_JAVA_OPTS=FAST_JVM)
    cmds = [
        ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui_port)],
        ["org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
         "--cores", "1", "--memory", WORKER_MEMORY, "--webui-port", "0",
         "--work-dir", str(logs / "work")],
    ]
    procs = []
    try:
        for cmd in cmds:
            name = cmd[0].rsplit(".", 1)[-1].lower()
            with (logs / f"{name}.log").open("wb") as log:
                procs.append(subprocess.Popen(["nice", str(spark_class), *cmd], env=env,
                                              stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + START_TIMEOUT_S
        while _alive_workers(ui_port) < 1:
            dead = [p.args for p in procs if p.poll() is not None]
            assert not dead and time.monotonic() < deadline, (
                f"standalone cluster did not start ({dead or 'timeout'}); logs in {logs}")
            time.sleep(0.5)
        yield Cluster(master_url, logs)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _populate(store_url: str, md_url: str) -> None:
    """Two agent flushes (two objects) over a compacted topic `s`, 5 keys x 2 partitions."""
    md = MetadataStore.open(md_url, create=True)
    md.create_topic("s", 2, {"cleanup.policy": "compact"})
    store = open_store(store_url)
    for rnd in range(2):
        with Agent(store, md, AgentConfig(linger_ms=60_000), clock=ManualClock()) as a:
            for i in range(20):
                a.produce("s", i % 2, b"k%d" % (i % 5), b"v%d-%d" % (rnd, i))
    md.close()


def _records(store_url: str, md_url: str, topic: str, partitions: int) -> list[tuple[
        int, int, bytes | None, bytes | None]]:
    md = MetadataStore.open(md_url, create=True)
    try:
        r = Reader(open_store(store_url), md)
        return [(p, x.offset, x.key, x.value) for p in range(partitions)
                for x in r.read(topic, p, 0)]
    finally:
        md.close()


def test_compact_without_executor_credentials_fails_in_one_line(
        cluster: Cluster, s3_url: str, postgres_url: str) -> None:
    """The issue's first run: the worker has no AWS variables and the user set none for the
    executors. The job fails on the executor (which reached the moto endpoint the driver
    shipped: the error is about credentials, not an endpoint); compact exits 1 naming it."""
    _populate(s3_url, postgres_url)
    before = _records(s3_url, postgres_url, "s", 2)
    driver_env = {**os.environ, "SILT_STORE": s3_url, "SILT_METADATA": postgres_url,
                  "PYTHONPATH": _clean_env()["PYTHONPATH"]}
    res = subprocess.run(
        ["nice", sys.executable, "-m", "cli", "compact", "--once", "--all", "--engine",
         "spark", "--master", cluster.master_url,
         *(arg for kv in SPARK_CONF.items() for arg in ("--spark-conf", "=".join(kv)))],
        env=driver_env, capture_output=True, text=True, timeout=APP_TIMEOUT_S, cwd=ROOT)
    assert res.returncode == 1, f"{res.stdout}{res.stderr[-3000:]}\nlogs: {cluster.logs}"
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("silt:")]
    assert line.startswith("silt: 1 of 1 compaction jobs failed; first: job ")
    assert "PermissionError" in line and "Unable to locate credentials" in line
    assert "spark.executorEnv" in line  # the hint says where executors take credentials
    assert " failed: 2 files" in res.stdout  # the report line of the failed job
    assert _records(s3_url, postgres_url, "s", 2) == before


def test_compaction_and_format_silt_on_the_cluster(
        cluster: Cluster, s3_url: str, postgres_url: str) -> None:
    """Credentials given explicitly through spark.executorEnv (the worker still has no AWS
    variable): format("silt") writes, run_on_spark compacts, format("silt") reads, all on
    the worker's executor against moto S3 and PostgreSQL."""
    md = MetadataStore.open(postgres_url, create=True)
    md.create_topic("c", 2, {"cleanup.policy": "compact"})
    md.close()
    driver_env = {**os.environ, "PYTHONPATH": _clean_env()["PYTHONPATH"]}
    res = subprocess.run(
        ["nice", sys.executable, "-m", "tests.spark.cluster_app", cluster.master_url, s3_url,
         postgres_url, "c", json.dumps(SPARK_CONF)],
        env=driver_env, capture_output=True, text=True, timeout=APP_TIMEOUT_S, cwd=ROOT)
    assert res.returncode == 0, f"{res.stdout}{res.stderr[-3000:]}\nlogs: {cluster.logs}"
    out = json.loads(res.stdout.splitlines()[-1])
    # Executors saw only the credentials the user gave: no endpoint, no region.
    assert out["executor_aws_variables"] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    (report,) = out["reports"]
    assert report["outcome"] == "committed", report
    assert report["input_files"] == 2 and report["requests"]["GET"] == 4
    # What Spark read after compaction is what the library reads: the latest of each key.
    want = _records(s3_url, postgres_url, "c", 2)
    assert len(want) == 20
    assert [tuple(r) for r in out["records_after"]] == sorted(
        (p, o, k.decode(), v.decode()) for p, o, k, v in want if k and v)
    assert {v for *_, v in want} == {b"r1-%d" % i for i in range(20)}


@pytest.mark.chaos
def test_stream_on_the_cluster(cluster: Cluster, s3_url: str, postgres_url: str,
                               tmp_path: Path) -> None:
    """readStream.format("silt") into writeStream.format("silt") on the worker's executor
    (Trigger.AvailableNow, limited batches): every source record once in the sink topic.
    A third driver on the cluster, 1-2.5 minutes of both cores here: `make chaos` runs it;
    `make test` keeps the cluster's executors with explicit credentials (the test above)
    and the same source and sink on local Spark (test_stream_spark.py)."""
    md = MetadataStore.open(postgres_url, create=True)
    md.create_topic("in", 2)
    md.create_topic("out", 2)
    with Agent(open_store(s3_url), md, AgentConfig(linger_ms=60_000), clock=ManualClock()) as a:
        for i in range(100):
            a.produce("in", i % 2, b"k%d" % i, b"v%d" % i)
    md.close()
    conf = {**SPARK_CONF, **{f"spark.executorEnv.{k}": os.environ[k]
                             for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}}
    driver_env = {**os.environ, "PYTHONPATH": _clean_env()["PYTHONPATH"]}
    res = subprocess.run(
        ["nice", sys.executable, "-m", "tests.spark.stream_app", cluster.master_url, s3_url,
         postgres_url, "in", "out", str(tmp_path / "checkpoint"), "availableNow",
         json.dumps(conf)],
        env=driver_env, capture_output=True, text=True, timeout=APP_TIMEOUT_S, cwd=ROOT)
    assert res.returncode == 0, f"{res.stdout}{res.stderr[-3000:]}\nlogs: {cluster.logs}"
    batches = [line for line in res.stdout.splitlines() if line.startswith("batch ")]
    assert [int(b.split()[2]) for b in batches if int(b.split()[2])] == [40, 40, 20]
    source = _records(s3_url, postgres_url, "in", 2)
    sink = _records(s3_url, postgres_url, "out", 2)
    assert sorted((p, v) for p, _o, _k, v in sink) == sorted((p, v) for p, _o, _k, v in source)
