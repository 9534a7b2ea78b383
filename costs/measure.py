"""`silt costs`: object-store request costs of siltstream vs two naive designs, measured.

Every design (`designs.DESIGNS`) runs the same generated workload for real against an S3
endpoint. Requests are counted at the client (the store's counters) and, when the tool
starts its own moto server, by the server too; the two must agree exactly.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agent import AgentConfig
from compactor import Compactor
from metadata import MetadataStore
from objectstore import REQUEST_TYPES, open_store

from .designs import DESIGNS
from .prices import request_dollars


@dataclass(frozen=True)
class Workload:
    """What `silt costs` generates."""

    partitions: tuple[int, ...] = (1, 10, 100, 1000)
    files_per_round: int = 4  # flushes (agent objects) per round, before each compaction
    rounds: int = 2
    records_per_partition: int = 2  # per flush
    record_bytes: int = 100
    keys: int = 50  # key cardinality per compacted partition
    compacted_share: float = 0.5
    flushes_per_second: float = 4.0  # ingest rate for the per-day figures (one agent: 250 ms)


@dataclass
class DesignResult:
    """One design at one partition count."""

    design: str
    partitions: int
    client: dict[str, int]
    server: dict[str, int] | None
    compaction_jobs: int
    compaction_input_files: int
    compaction_gets: int
    ingest_puts: int
    dollars: float
    dollars_per_day: float
    gets_per_input_file: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def s3_endpoint() -> Iterator[tuple[str, Any]]:
    """AWS_ENDPOINT_URL if set (LocalStack, MinIO, AWS), else a moto server we start here."""
    external = os.environ.get("AWS_ENDPOINT_URL")
    if external:
        yield external, None
        return
    try:
        from objectstore.testserver import RecordingMotoServer
    except ImportError as exc:  # pragma: no cover - moto missing
        raise RuntimeError("silt costs needs moto[server] (pip install 'siltstream[dev]')"
                           " or AWS_ENDPOINT_URL") from exc
    server = RecordingMotoServer().start()
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                           "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update({"AWS_ENDPOINT_URL": server.endpoint_url, "AWS_ACCESS_KEY_ID": "costs",
                       "AWS_SECRET_ACCESS_KEY": "costs", "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        yield server.endpoint_url, server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run_design(design: str, partitions: int, w: Workload, endpoint: str, server: Any,
                prices: Mapping[str, float]) -> DesignResult:
    import boto3

    d = DESIGNS[design]
    bucket = f"silt-costs-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    compacted = round(partitions * w.compacted_share)
    plain = partitions - compacted
    with tempfile.TemporaryDirectory(prefix="silt-costs-") as tmp:
        md = MetadataStore.open(f"sqlite:///{tmp}/md.db", create=True)
        if compacted:
            md.create_topic("state", compacted, {"cleanup.policy": "compact"})
        if plain:
            md.create_topic("events", plain)
        store = open_store(f"s3://{bucket}/silt")
        if server is not None:
            server.clear_log()
        before = store.counters()
        value = b"v" * w.record_bytes
        jobs = files = gets = 0
        cfg = AgentConfig(linger_ms=3_600_000)
        comp = Compactor(store, md, open_input=d.inputs(md))
        ingest_puts = 0
        for rnd in range(w.rounds):
            round_start = store.counters()
            with d.agent(store, md, cfg) as agent:
                for f in range(w.files_per_round):
                    for i in range(w.records_per_partition):
                        n = (rnd * w.files_per_round + f) * w.records_per_partition + i
                        for p in range(compacted):
                            agent.produce("state", p, b"k%d" % (n % w.keys), value)
                        for p in range(plain):
                            agent.produce("events", p, None, value)
                    agent.flush()
            ingest_puts += (store.counters() - round_start).writes
            for report in comp.run_once(everything=True):
                jobs += 1
                files += report.input_files
                gets += report.requests.get("GET", 0)
        used = (store.counters() - before).as_dict()
        md.close()
    client = {k: used[k] for k in REQUEST_TYPES if used[k]}
    server_counts = None
    if server is not None:
        served = server.counts()
        server_counts = {k: v for k, v in served.items() if k != "CreateBucket"}
    dollars = request_dollars(client, prices)
    rounds_per_day = 86_400 * w.flushes_per_second / w.files_per_round
    return DesignResult(
        design=design, partitions=partitions, client=client, server=server_counts,
        compaction_jobs=jobs, compaction_input_files=files, compaction_gets=gets,
        ingest_puts=ingest_puts, dollars=dollars,
        dollars_per_day=dollars / w.rounds * rounds_per_day,
        gets_per_input_file=round(gets / files, 2) if files else 0.0,
    )


def run_costs(w: Workload, prices: Mapping[str, float],
              progress: Callable[[str], None] = lambda s: None) -> list[DesignResult]:
    """Every design at every partition count, against one endpoint."""
    results = []
    with s3_endpoint() as (endpoint, server):
        for partitions in w.partitions:
            for design in DESIGNS:
                progress(f"{design} with {partitions} partitions per file")
                results.append(_run_design(design, partitions, w, endpoint, server, prices))
    return results
