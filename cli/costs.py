"""`silt costs`: object-store request costs of siltstream vs two naive designs, measured.

Three designs run the same generated workload for real against an S3 endpoint:
1. siltstream: one multi-partition object per flush; compaction reads each input file with
   two streams (2 GETs per file, however many partitions it holds);
2. per-partition seeks: the same objects, but compaction issues a ranged GET per
   (file, partition) per pass, as a seek-based cleaner on object storage would;
3. per-partition objects: one object per partition per flush (as tiered storage does),
   compacted with two streams per (now single-partition) file.
Requests are counted at the client (the store's counters) and, when the tool starts its own
moto server, by the server too; the two must agree exactly.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from agent import Agent, AgentConfig
from agent.config import OBJECTS_MULTI_PARTITION, OBJECTS_PER_PARTITION
from compactor import Compactor, CompactorConfig
from compactor.merge import READ_SEEKS, READ_STREAMS
from metadata import MetadataStore
from objectstore import REQUEST_TYPES, open_store

DESIGNS: dict[str, tuple[str, str]] = {
    # name: (agent objects, compactor read strategy)
    "siltstream": (OBJECTS_MULTI_PARTITION, READ_STREAMS),
    "per-partition-seeks": (OBJECTS_MULTI_PARTITION, READ_SEEKS),
    "per-partition-objects": (OBJECTS_PER_PARTITION, READ_STREAMS),
}

# Dollars per request. S3 bills PUT/COPY/POST/LIST in one class and GET/SELECT/HEAD in
# another; DELETE is free.
PRICE_TABLES: dict[str, dict[str, float]] = {
    "s3-standard": {"write": 0.005 / 1000, "read": 0.0004 / 1000},
    "s3-express": {"write": 0.00113 / 1000, "read": 0.00003 / 1000},
    "gcs-standard": {"write": 0.005 / 1000, "read": 0.0004 / 1000},
    "r2": {"write": 0.0045 / 1000, "read": 0.00036 / 1000},
}
WRITE_CLASS = ("PUT", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "LIST")
READ_CLASS = ("GET", "HEAD")


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


def request_dollars(counts: Mapping[str, int], prices: Mapping[str, float]) -> float:
    """Dollars for these request counts under a price table."""
    writes = sum(counts.get(k, 0) for k in WRITE_CLASS)
    reads = sum(counts.get(k, 0) for k in READ_CLASS)
    return writes * prices["write"] + reads * prices["read"]


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

    objects, strategy = DESIGNS[design]
    bucket = f"silt-costs-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    compacted = round(partitions * w.compacted_share)
    plain = partitions - compacted
    with tempfile.TemporaryDirectory(prefix="silt-costs-") as tmp:
        md = MetadataStore.open(f"sqlite:///{tmp}/md.db")
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
        cfg = AgentConfig(linger_ms=3_600_000, objects=objects)
        comp = Compactor(store, md, CompactorConfig(read_strategy=strategy))
        ingest_puts = 0
        for rnd in range(w.rounds):
            round_start = store.counters()
            with Agent(store, md, cfg) as agent:
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


def ratios(results: Sequence[DesignResult]) -> dict[str, float]:
    """Request dollars of each design relative to siltstream, at the largest partition count."""
    top = max(r.partitions for r in results)
    at_top = {r.design: r.dollars for r in results if r.partitions == top}
    base = at_top["siltstream"] or 1e-12
    return {d: round(v / base, 2) for d, v in at_top.items()}


def as_json(w: Workload, price_table: str, results: Sequence[DesignResult]) -> dict[str, Any]:
    """The whole report as JSON-able data."""
    return {
        "workload": asdict(w),
        "price_table": price_table,
        "prices_per_request": PRICE_TABLES.get(price_table),
        "results": [asdict(r) for r in results],
        "dollar_ratio_vs_siltstream_at_max_partitions": ratios(results),
        "client_server_agree": all(r.server is None or r.server == r.client for r in results),
    }


def plot(results: Sequence[DesignResult], path: str) -> None:
    """Compaction GETs and request dollars vs partitions per file, one line per design."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for design in DESIGNS:
        rows = sorted((r for r in results if r.design == design), key=lambda r: r.partitions)
        xs = [r.partitions for r in rows]
        ax1.plot(xs, [max(r.compaction_gets, 1) for r in rows], marker="o", label=design)
        ax2.plot(xs, [r.dollars_per_day for r in rows], marker="o", label=design)
    for ax, title, ylabel in ((ax1, "GET requests in compaction", "GETs"),
                              (ax2, "Request dollars per day", "USD / day")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("partitions per file")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

