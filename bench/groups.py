"""Consumer groups against one `silt agent` process (issue 12's figures), file:// store.

- rebalance (SQLite metadata): three confluent-kafka consumers (bench/group_member.py, one
  process each) in one new group over a 12-partition topic, eager `range` assignment; 1 to
  2 heartbeat intervals after they hold 4 partitions each, one leaves (close()) or is
  killed (SIGKILL), and the figure is the time until the other two hold all 12 partitions
  (the later of their on_assign callbacks), from close() returning or from the kill;
  "notice" is the time to the first on_revoke of the other two (a heartbeat answered
  REBALANCE_IN_PROGRESS), "rejoin" the rest (JoinGroup and SyncGroup). The agent runs with
  group.initial.rebalance.delay.ms 0; that delay applies only to the first join of an
  Empty group, so Kafka's default 3000 would delay the setup, not these rebalances.
- commit: simple consumers (no subscription), one client thread each with its own group,
  committing `partitions` offsets synchronously (Consumer.commit(offsets=...,
  asynchronous=False)) in a loop for a while: commits/s wall and per agent core (the
  agent's CPU seconds from /proc).
- rows: metadata rows written per OffsetCommit, counted by AFTER INSERT/UPDATE/DELETE row
  triggers installed on every table of the agent's database (SQLite and PostgreSQL alike),
  grouped by table: group_offsets' rows, and what else the agent wrote meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import sqlalchemy as sa
from confluent_kafka import Consumer, TopicPartition

from harness.agent_process import REPO, AgentProcess
from metadata import MetadataStore
from metadata.engine import engine_url

TOPIC = "groups"
PARTITIONS = 12
MEMBERS = 3
TIMEOUT_S = 120.0
# The agent: no initial rebalance delay; session timeouts down to 1 s allowed.
AGENT_ENV = {"SILT_AGENT_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
             "SILT_AGENT_GROUP_MIN_SESSION_TIMEOUT_MS": "1000"}
WRITES_TABLE = "bench_row_writes"


@dataclass(frozen=True)
class GroupsParams:
    """Sizes of one run of the suite."""

    repeats: int  # rebalances measured per kind
    session_ms: int  # the members' session.timeout.ms
    heartbeat_ms: int  # and heartbeat.interval.ms
    commit_seconds: float  # each commit throughput run
    commit_clients: tuple[int, ...] = (1, 4)
    commits_counted: int = 200  # commits per rows-written measure


# ------------------------------------------------------------------ rebalance


@dataclass
class _Member:
    """A group member process as the parent sees it, from its events."""

    proc: subprocess.Popen[str]
    assignment: frozenset[int] = frozenset()
    assigned_at: float = 0.0
    revoked_at: float = 0.0
    closed: tuple[float, float] | None = None
    killed: bool = False


@dataclass
class _Group:
    """Three members of one group and the events they report, in arrival order."""

    members: list[_Member]
    events: queue.Queue[tuple[int, dict[str, Any]]] = field(default_factory=queue.Queue)

    def pump(self, done: Callable[[], bool], what: str) -> None:
        """Apply the members' events until `done()`; RuntimeError after TIMEOUT_S."""
        deadline = time.monotonic() + TIMEOUT_S
        while not done():
            try:
                i, ev = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"timed out waiting for {what}") from None
            m = self.members[i]
            if ev["event"] == "assigned":
                m.assignment, m.assigned_at = frozenset(ev["partitions"]), ev["t"]
            elif ev["event"] == "revoked":
                m.assignment, m.revoked_at = frozenset(), ev["t"]
            elif ev["event"] == "closed":
                m.closed = (ev["t0"], ev["t1"])
            elif ev["event"] == "exit" and m.closed is None and not m.killed:
                raise RuntimeError(f"member {i} exited before close")


def _read_events(i: int, out: IO[str], events: queue.Queue[tuple[int, dict[str, Any]]]) -> None:
    with out:
        for line in out:
            events.put((i, json.loads(line)))
    events.put((i, {"event": "exit"}))


@contextlib.contextmanager
def _members(bootstrap: str, group_id: str, p: GroupsParams) -> Iterator[_Group]:
    """MEMBERS consumer processes subscribed to TOPIC in `group_id`; stopped on exit."""
    group = _Group([])
    readers: list[threading.Thread] = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        for i in range(MEMBERS):
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.group_member", bootstrap, group_id, TOPIC,
                 str(p.session_ms), str(p.heartbeat_ms)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
            group.members.append(_Member(proc))
            assert proc.stdout is not None
            readers.append(threading.Thread(target=_read_events,
                                            args=(i, proc.stdout, group.events), daemon=True))
            readers[-1].start()
        yield group
    finally:
        for m in group.members:
            if m.proc.stdin is not None:
                with contextlib.suppress(BrokenPipeError):
                    m.proc.stdin.close()  # EOF: the member closes and exits
        for m in group.members:
            try:
                m.proc.wait(30)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait()
        for t in readers:  # each closes its member's stdout at EOF
            t.join()


def _rebalance_once(bootstrap: str, kind: str, p: GroupsParams) -> dict[str, float]:
    """One group of three, stable at 4 partitions each; member 0 leaves (`kind` "leave")
    or is killed ("kill"); ms until the other two hold all partitions."""
    everything = frozenset(range(PARTITIONS))
    with _members(bootstrap, f"rebalance-{uuid.uuid4().hex[:8]}", p) as g:
        g.pump(lambda: all(len(m.assignment) == PARTITIONS // MEMBERS for m in g.members)
               and frozenset().union(*(m.assignment for m in g.members)) == everything,
               "the first stable assignment")
        # The members' heartbeats start together when the rebalance ends: act at a random
        # phase of their cycle, as a leave or crash would in practice.
        time.sleep(random.uniform(1, 2) * p.heartbeat_ms / 1000)
        first, rest = g.members[0], g.members[1:]
        if kind == "leave":
            assert first.proc.stdin is not None
            first.proc.stdin.write("close\n")
            first.proc.stdin.flush()
            g.pump(lambda: first.closed is not None, "close() to return")
            assert first.closed is not None
            start, t0 = first.closed
        else:
            first.killed = True
            t0 = start = time.monotonic()
            first.proc.send_signal(signal.SIGKILL)

        def reassigned() -> bool:
            return all(m.assigned_at > start for m in rest) and \
                frozenset().union(*(m.assignment for m in rest)) == everything

        g.pump(reassigned, f"the partitions of member 0 ({kind}) to be reassigned")
        done = max(m.assigned_at for m in rest)
        noticed = min(m.revoked_at for m in rest if m.revoked_at > start)
        return {"ms": (done - t0) * 1000, "notice_ms": (noticed - t0) * 1000,
                "rejoin_ms": (done - noticed) * 1000, "close_ms": (t0 - start) * 1000}


def run_rebalance(agent: AgentProcess, p: GroupsParams) -> list[dict[str, Any]]:
    """`p.repeats` rebalances after a clean leave and after a SIGKILL: median, min, max."""
    rows = []
    for kind in ("leave", "kill"):
        runs = [_rebalance_once(agent.bootstrap, kind, p) for _ in range(p.repeats)]
        median = {k: round(statistics.median(r[k] for r in runs)) for k in runs[0]}
        ms = [r["ms"] for r in runs]
        row: dict[str, Any] = {
            "measure": f"rebalance after {'close()' if kind == 'leave' else 'SIGKILL'}",
            "repeats": p.repeats, "session_timeout_ms": p.session_ms,
            "heartbeat_interval_ms": p.heartbeat_ms, "ms_median": median["ms"],
            "ms_min": round(min(ms)), "ms_max": round(max(ms)),
            "notice_ms_median": median["notice_ms"], "rejoin_ms_median": median["rejoin_ms"]}
        if kind == "leave":
            row["close_ms_median"] = median["close_ms"]
        rows.append(row)
    return rows


# ------------------------------------------------------------------ commits


def _committer(bootstrap: str, group_id: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                     "enable.auto.commit": False})


def _commit(consumer: Consumer, partitions: int, offset: int) -> None:
    """One synchronous OffsetCommit of `partitions` offsets; raises on any error."""
    done = consumer.commit(offsets=[TopicPartition(TOPIC, i, offset) for i in range(partitions)],
                           asynchronous=False)
    failed = [tp for tp in done or () if tp.error is not None]
    if failed:
        raise RuntimeError(f"commit failed: {failed[0].error}")


def run_commit_throughput(agent: AgentProcess, clients: int, partitions: int,
                          seconds: float) -> dict[str, Any]:
    """`clients` threads, each a simple consumer of its own group committing `partitions`
    offsets synchronously in a loop for `seconds`."""
    consumers = [_committer(agent.bootstrap, f"commit-{uuid.uuid4().hex[:8]}")
                 for _ in range(clients)]
    for c in consumers:  # finds the coordinator, which loads the group
        _commit(c, partitions, 0)
    counts = [0] * clients
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    stop = threading.Event()

    def loop(i: int) -> None:
        start.wait()
        try:
            while not stop.is_set():
                counts[i] += 1
                _commit(consumers[i], partitions, counts[i])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    cpu0, wall0 = agent.cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    cpu, wall = agent.cpu_seconds() - cpu0, time.perf_counter() - wall0
    for c in consumers:
        c.close()
    if errors:
        raise RuntimeError(f"a committer failed: {errors[0]}")
    commits = sum(counts)
    return {"measure": "OffsetCommit", "clients": clients, "partitions_per_commit": partitions,
            "commits": commits, "agent_cpu_s": round(cpu, 2),
            "commits_per_s_wall": round(commits / wall),
            "commits_per_s_per_agent_core": round(commits / cpu) if cpu else None}


# ------------------------------------------------------------------ rows written


def _install_write_counters(md_url: str) -> sa.Engine:
    """Row triggers on every table of the database at `md_url` recording each row
    inserted, updated or deleted into WRITES_TABLE (table, operation)."""
    engine = sa.create_engine(engine_url(md_url))
    pg = engine.dialect.name == "postgresql"
    tables = sa.inspect(engine).get_table_names()
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE TABLE {WRITES_TABLE} (tbl TEXT NOT NULL, op TEXT NOT NULL)")
        if pg:
            conn.exec_driver_sql(
                f"CREATE FUNCTION bench_count_write() RETURNS trigger LANGUAGE plpgsql AS $$"
                f" BEGIN INSERT INTO {WRITES_TABLE} VALUES (TG_TABLE_NAME, TG_OP);"
                f" RETURN NULL; END $$")
        for table in tables:
            for op in ("INSERT", "UPDATE", "DELETE"):
                name = f"bench_{table}_{op.lower()}"
                if pg:
                    conn.exec_driver_sql(
                        f'CREATE TRIGGER {name} AFTER {op} ON "{table}" FOR EACH ROW'
                        f" EXECUTE FUNCTION bench_count_write()")
                else:
                    conn.exec_driver_sql(
                        f'CREATE TRIGGER {name} AFTER {op} ON "{table}" FOR EACH ROW'
                        f" BEGIN INSERT INTO {WRITES_TABLE} VALUES ('{table}', '{op}'); END")
    return engine


def _take_writes(engine: sa.Engine) -> dict[str, int]:
    """The rows written per table since the last call (and forget them)."""
    with engine.begin() as conn:
        rows = conn.exec_driver_sql(
            f"SELECT tbl, count(*) FROM {WRITES_TABLE} GROUP BY tbl").all()
        conn.exec_driver_sql(f"DELETE FROM {WRITES_TABLE}")
    return {str(t): int(n) for t, n in rows}


def _by_table(writes: dict[str, int]) -> str:
    return ", ".join(f"{t} {n}" for t, n in sorted(writes.items()))


def run_rows_per_commit(agent: AgentProcess, partitions: int, commits: int,
                        engine: sa.Engine) -> dict[str, Any]:
    """Rows the agent writes per OffsetCommit of `partitions` offsets, by table: the first
    commit of a new group (one simple consumer), then `commits` more (which update the rows
    the first inserted)."""
    consumer = _committer(agent.bootstrap, f"rows-{uuid.uuid4().hex[:8]}")
    try:
        _take_writes(engine)
        _commit(consumer, partitions, 0)
        first = _take_writes(engine)
        for i in range(commits):
            _commit(consumer, partitions, i + 1)
        writes = _take_writes(engine)
    finally:
        consumer.close()
    offsets = writes.pop("group_offsets", 0)
    return {"measure": "rows written", "partitions_per_commit": partitions,
            "commits": commits, "first_commit_rows": _by_table(first),
            "group_offsets_rows_per_commit": round(offsets / commits, 2),
            "other_rows_per_commit": round(sum(writes.values()) / commits, 3),
            "other_rows": _by_table(writes)}


# ------------------------------------------------------------------ the suite


def run_groups_on(md_url: str, tmp: Path, p: GroupsParams,
                  rebalance: bool) -> list[dict[str, Any]]:
    """Start an agent on file://`tmp` + `md_url` (an empty database), run the measures (the
    rebalances if `rebalance`), stop it."""
    md = MetadataStore.open(md_url, create=True)
    md.create_topic(TOPIC, PARTITIONS)
    md.close()
    agent = AgentProcess(f"file://{tmp}/objects", md_url, tmp / "agent.log", dict(AGENT_ENV))
    agent.start()
    try:
        rows = run_rebalance(agent, p) if rebalance else []
        for clients in p.commit_clients:
            rows.append(run_commit_throughput(agent, clients, 1, p.commit_seconds))
        rows.append(run_commit_throughput(agent, max(p.commit_clients), PARTITIONS,
                                          p.commit_seconds))
        engine = _install_write_counters(md_url)  # after the throughput runs: triggers cost
        try:
            rows += [run_rows_per_commit(agent, n, p.commits_counted, engine)
                     for n in (1, PARTITIONS)]
        finally:
            engine.dispose()
    except BaseException:
        print(agent.log(), file=sys.stderr)
        raise
    finally:
        agent.terminate()
    metadata = "postgresql" if md_url.startswith("postgresql") else "sqlite"
    return [{"benchmark": "groups", "metadata": metadata, **row} for row in rows]


def run_groups(p: GroupsParams, postgres_url: str | None = None) -> list[dict[str, Any]]:
    """Rebalance, commit and rows-written figures on SQLite; commit and rows on the empty
    PostgreSQL database `postgres_url` too, if given."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="silt-groups-") as tmp:
        rows += run_groups_on(f"sqlite:///{tmp}/md.db", Path(tmp), p, rebalance=True)
    if postgres_url is not None:
        with tempfile.TemporaryDirectory(prefix="silt-groups-") as tmp:
            rows += run_groups_on(postgres_url, Path(tmp), p, rebalance=False)
    return rows
