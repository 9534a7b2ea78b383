"""The object-store fault suite: produce, compact, collect and consume through a proxy that
fails a share of the S3 requests (faults/proxy.py), and check that nothing is lost,
duplicated or left behind.

One trial, on a fresh bucket of a moto server and a fresh SQLite metadata store, every
request through the proxy:
1. produce ROUNDS rounds of records to a delete-policy topic with the library's `Agent`
   (one flush, so one object, per round); each acknowledged offset is remembered;
2. `silt compact --once --all --json` (a real process): the round files merged into one;
3. `silt gc --grace-ms 0 --json` (a real process, compactor.lease.ms 1: nothing else is
   writing by then): the retired inputs deleted;
4. read every partition with the library's `Reader`.
Then, reading once more straight from the server: every acknowledged record is read exactly
once, at its offset, in order (lost,
duplicated, misplaced: 0), and every object in the bucket belongs to a live file (orphans:
0). Faults injected and retries are the proxy's counts (a retry: a failed request sent
again); a failure is a command or produce that gave up (each with its one-line error).
The retry policy is the `store.retry.*` settings' (`SILT_STORE_RETRY_ATTEMPTS=1`: none).

`run(trials, fault_rate, seed)` returns a `StoreFaultsResult`; `python -m faults.storefaults
--trials N --seed S [--fault-rate R]` prints it as JSON (exit 1 unless it is `ok`: clean,
and no failure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3

from agent import Agent, AgentConfig, Reader
from metadata import MetadataStore
from metadata.schema import FILE_LIVE
from objects.keys import MARKER_KEY
from objectstore import ObjectStore, RetryPolicy, S3Options, StoreSpec, open_store
from objectstore.testserver import RecordingMotoServer
from settings.load import load_settings

from .proxy import FAILING, SLOW, FaultProxy

TOPIC = "faults"
PARTITIONS = 3
ROUNDS = 6
RECORDS_PER_ROUND = 30
DEFAULT_FAULT_RATE = 0.10
REGION = "us-east-1"
ROOT = Path(__file__).resolve().parent.parent  # the source tree `silt` runs from
COMMAND_TIMEOUT_S = 300


@dataclass(frozen=True, slots=True)
class TrialResult:
    """One trial's figures (see the module docstring)."""

    seed: int
    acked: int  # records whose produce was acknowledged with an offset
    read: int  # records read back
    lost: int  # acknowledged, not read at their offset
    duplicated: int  # read more than once
    misplaced: int  # read at an offset other than their acknowledged one, or out of order
    orphans: int  # objects no live file references, after GC
    requests: int  # requests the proxy saw
    injected: dict[str, int]  # faults injected, by kind
    retries: int  # failed requests sent again
    failures: list[str]  # commands or produces that gave up, one line each

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.misplaced or self.orphans)


@dataclass(frozen=True, slots=True)
class StoreFaultsResult:
    """A run's totals, and each trial's figures."""

    trials: int
    fault_rate: float
    seed: int
    seconds: float
    acked: int
    lost: int
    duplicated: int
    misplaced: int
    orphans: int
    requests: int
    faults_injected: int  # failed requests injected (slow answers not counted)
    slow_answers: int
    retries: int
    failures: int
    per_trial: list[TrialResult] = field(repr=False)

    @property
    def clean(self) -> bool:
        """No record lost, duplicated or misplaced, and no orphan object."""
        return all(t.clean for t in self.per_trial)

    @property
    def ok(self) -> bool:
        """Clean, and every command and produce completed (its retries sufficed)."""
        return self.clean and not self.failures

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["clean"] = self.clean
        out["ok"] = self.ok
        out["failure_messages"] = [m for t in self.per_trial for m in t.failures]
        del out["per_trial"]
        return out


def run(trials: int, fault_rate: float = DEFAULT_FAULT_RATE, seed: int = 0) -> StoreFaultsResult:
    """Run `trials` trials with `fault_rate` of the requests failed (seeded by `seed`)."""
    if trials < 1:
        raise ValueError(f"trials must be >= 1, not {trials}")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    started = time.monotonic()
    server = RecordingMotoServer().start()
    results = []
    try:
        with FaultProxy(server.endpoint_url) as proxy, tempfile.TemporaryDirectory() as tmp:
            for n in range(trials):
                results.append(_trial(server, proxy, Path(tmp) / f"trial-{n}", fault_rate,
                                      seed * 100_003 + n))
                server.clear_log()
    finally:
        server.stop()
    injected: Counter[str] = Counter()
    for t in results:
        injected.update(t.injected)
    return StoreFaultsResult(
        trials=trials, fault_rate=fault_rate, seed=seed,
        seconds=round(time.monotonic() - started, 2),
        acked=sum(t.acked for t in results), lost=sum(t.lost for t in results),
        duplicated=sum(t.duplicated for t in results),
        misplaced=sum(t.misplaced for t in results), orphans=sum(t.orphans for t in results),
        requests=sum(t.requests for t in results),
        faults_injected=sum(injected[k] for k in FAILING), slow_answers=injected[SLOW],
        retries=sum(t.retries for t in results),
        failures=sum(len(t.failures) for t in results), per_trial=results)


def _trial(server: RecordingMotoServer, proxy: FaultProxy, work: Path, rate: float,
           seed: int) -> TrialResult:
    work.mkdir(parents=True)
    bucket = f"faults-{uuid.uuid4().hex[:12]}"
    url = f"s3://{bucket}/silt"
    md_url = f"sqlite:///{work}/metadata.db"
    direct = open_store(StoreSpec(url, S3Options(server.endpoint_url, REGION, "path")),
                        counting=False, retry=None)
    boto3.client("s3", endpoint_url=server.endpoint_url, region_name=REGION).create_bucket(
        Bucket=bucket)
    md = MetadataStore.open(md_url, create=True)
    md.create_topic(TOPIC, PARTITIONS)
    policy = RetryPolicy.of(load_settings().store)  # SILT_STORE_RETRY_*, as the commands
    store = open_store(StoreSpec(url, S3Options(proxy.endpoint_url, REGION, "path")),
                       counting=False, retry=policy)
    proxy.reset_counts()
    proxy.configure(rate=rate, seed=seed)
    failures: list[str] = []
    try:
        acked = _produce(store, md, seed, failures)
        env = {**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint_url,
               "AWS_DEFAULT_REGION": REGION, "SILT_STORE": url, "SILT_METADATA": md_url,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                           os.environ.get("PYTHONPATH")]))}
        _silt(["compact", "--once", "--all", "--json"], env, failures)
        _silt(["gc", "--grace-ms", "0", "--json"], {**env, "SILT_COMPACTOR_LEASE_MS": "1"},
              failures)
        _consume(store, md, failures)
    finally:
        proxy.configure(rate=0.0)
        counts = proxy.counts()
    read = _consume(direct, md, failures)  # what is there, read without faults
    live = {f.object_key for f in md.audit_snapshot().files if f.state == FILE_LIVE}
    orphans = sum(1 for o in direct.list() if o.key not in live and o.key != MARKER_KEY)
    md.close()
    return _check(seed, acked, read, orphans, counts.requests, counts.injected,
                  counts.retried, failures)


def _produce(store: ObjectStore, md: MetadataStore, seed: int,
             failures: list[str]) -> dict[str, tuple[int, int]]:
    """Produce the rounds; returns value -> (partition, offset) of each acknowledged one."""
    acked: dict[str, tuple[int, int]] = {}
    config = AgentConfig(linger_ms=60_000)  # one flush per round, when asked
    with Agent(store, md, config) as agent:
        for rnd in range(ROUNDS):
            futures = []
            for i in range(RECORDS_PER_ROUND):
                value = f"{seed}-{rnd}-{i}"
                partition = i % PARTITIONS
                futures.append((value, partition, agent.produce(
                    TOPIC, partition, f"k{i}".encode(), value.encode())))
            agent.flush()
            for value, partition, fut in futures:
                exc = fut.exception()
                if exc is None:
                    acked[value] = (partition, fut.result())
                else:
                    failures.append(f"produce round {rnd}: {_line(exc)}")
                    break
    return acked


def _silt(args: list[str], env: dict[str, str], failures: list[str]) -> None:
    """Run `silt ARGS` as its own process; a nonzero exit is a failure (its last line)."""
    proc = subprocess.run([sys.executable, "-m", "cli", *args], env=env, capture_output=True,
                          text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
        failures.append(f"silt {args[0]}: {lines[-1]}")


def _consume(store: ObjectStore, md: MetadataStore,
             failures: list[str]) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every record read, in the order read."""
    out: list[tuple[int, int, str]] = []
    reader = Reader(store, md)
    try:
        for p in md.partitions(TOPIC):
            for rec in reader.read(TOPIC, p.partition, p.log_start_offset):
                out.append((p.partition, rec.offset, (rec.value or b"").decode()))
    except Exception as exc:
        failures.append(f"consume: {_line(exc)}")
    return out


def _check(seed: int, acked: dict[str, tuple[int, int]], read: list[tuple[int, int, str]],
           orphans: int, requests: int, injected: dict[str, int], retries: int,
           failures: list[str]) -> TrialResult:
    seen = Counter(value for _, _, value in read)
    where = {value: (partition, offset) for partition, offset, value in read}
    lost = sum(1 for value in acked if value not in seen)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    misplaced = sum(1 for value, at in acked.items() if value in where and where[value] != at)
    last: dict[int, int] = {}
    for partition, offset, _ in read:
        if offset <= last.get(partition, -1):
            misplaced += 1
        last[partition] = offset
    return TrialResult(seed=seed, acked=len(acked), read=len(read), lost=lost,
                       duplicated=duplicated, misplaced=misplaced, orphans=orphans,
                       requests=requests, injected=injected, retries=retries,
                       failures=failures)


def _line(exc: BaseException) -> str:
    text = str(exc).splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults.storefaults",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fault-rate", type=float, default=DEFAULT_FAULT_RATE)
    args = parser.parse_args(argv)
    result = run(args.trials, args.fault_rate, args.seed)
    print(json.dumps(result.as_dict(), indent=2))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
