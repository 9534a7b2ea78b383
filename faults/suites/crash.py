"""The crash suite: agent, compactor and GC processes SIGKILLed at each named step of
their write paths (faults/killpoints.py) and at random moments.

One trial, on a fresh SQLite metadata store and file store: 30 records are produced and
acknowledged first; then an agent (60 more records, a flush every 10) and a compactor (3
rounds of every job) run at once; then a compactor whose clock is 10 minutes ahead (leases
expired, GC grace passed: the next process to come along) runs a round and GC. One of the
three is the trial's victim: killed at the Nth time it reaches a step (even trials, the
steps in turn), or at a random moment of its run (odd trials). The transaction steps
(`txn.*`) run the transactional trial instead (faults/suites/txn.py: a coordinator agent
killed at one of EndTxn's steps under a confluent-kafka transactional producer; every
transaction wholly committed or wholly aborted, no last stable offset stuck). Afterwards:

- every acknowledged record is read exactly once, at its offset (on the compacted topic:
  or a later record of its key is), offsets increase, and nothing read was never produced;
- a recovery compaction of everything (clock 20 minutes ahead) leaves the delete-policy
  topic as it was and the compacted topic as Kafka's cleaner leaves the log it read;
- after its GC, every object is a live file's and every live file's object exists, and no
  upload temp file is left on the file store (`objectstore/local.py`: deleting a key
  deletes its leftover upload; before, 2 in 24 trials left one forever).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from clock import ManualClock
from compactor import Compactor, CompactorConfig
from faults import killpoints, procs
from faults.check import (
    CRASH_KINDS,
    Tally,
    check_compacted,
    check_log,
    check_objects,
    read_acks,
    read_logs,
)
from faults.suites import txn
from metadata import MetadataStore
from objectstore import open_store

TOPICS = (("d", 2, 0), ("c", 2, 5))  # (name, partitions, keys): delete policy, compacted
PARTITIONS = [(t, p) for t, n, _ in TOPICS for p in range(n)]
COMPACTED = {"c"}
STEPS = [*killpoints.steps("produce"), *killpoints.steps("compact"), *killpoints.steps("gc"),
         *killpoints.steps("txn")]
ROLE_OF_STEP = {"produce": "agent", "compact": "compactor", "gc": "gc", "txn": "coordinator"}
AHEAD_MS = 10 * 60_000
# Besides the record and object checks: upload temp files left on the file store after GC.
KINDS = (*CRASH_KINDS, "upload_leftovers", *txn.KINDS)
FIRST_GUESS_S = 0.2  # a process's duration before one was measured


@dataclass(frozen=True, slots=True)
class Plan:
    """Whom a trial kills and how: at `step` (e.g. `gc.marked@2`), or at `moment` (0-1) of
    how long the victim's process has been taking (measured over the earlier trials)."""

    victim: str  # agent | compactor | gc | coordinator (the transactional trial)
    step: str = ""
    moment: float = 0.0

    def describe(self) -> str:
        return self.step or f"{self.victim} at random"


def plan(i: int, rng: random.Random) -> Plan:
    """Trial i's kill: steps in turn on even trials, a random moment on odd ones."""
    if i % 2 == 0:
        name = STEPS[(i // 2) % len(STEPS)]
        role = ROLE_OF_STEP[name.split(".")[0]]
        # A GC pass reaches each of its steps once; agents and compactors may twice; a
        # transactional trial ends up to 4 transactions (each stored, marked, completed).
        nth = 1 if role == "gc" else rng.randint(1, 4 if role == "coordinator" else 2)
        return Plan(role, f"{name}@{nth}")
    return Plan(rng.choice(["agent", "compactor", "gc"]), moment=rng.random())


def run(trials: int, seed: int) -> dict[str, Any]:
    """Run `trials` trials; the figures (see faults/chaos.py)."""
    rng = random.Random(seed)
    tally = Tally(KINDS)
    outcomes: Counter[str] = Counter()
    per_step: Counter[tuple[str, bool]] = Counter()  # (step, killed there)
    errors: list[str] = []
    durations: dict[str, float] = {}
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="silt-chaos-crash-"))
    try:
        for i in range(trials):
            where = root / f"t{i}"
            where.mkdir()
            kill = plan(i, rng)
            outcome = one(where, kill, rng, tally, errors, durations)
            outcomes[outcome] += 1
            if kill.step:
                per_step[kill.step.split("@")[0], outcome == "step"] += 1
            shutil.rmtree(where, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    return {
        "trials": trials,
        "killed at a named step": outcomes["step"],
        "named step not reached (ran to the end)": outcomes["step not reached"],
        "killed at a random moment": outcomes["random"],
        "random kill after the process ended": outcomes["random too late"],
        "kills per step (killed/trials)": ", ".join(
            f"{s} {per_step[s, True]}/{per_step[s, True] + per_step[s, False]}" for s in STEPS),
        **tally.outcome(errors, elapsed, trials),
    }


def one(where: Path, kill: Plan, rng: random.Random, tally: Tally, errors: list[str],
        durations: dict[str, float]) -> str:
    """One trial of either kind (the transactional one for the coordinator's steps);
    returns how the victim ended."""
    if kill.victim == "coordinator":
        return txn.trial(where, kill.step, rng, tally, errors)
    return trial(where, kill, tally, errors, durations)


def trial(where: Path, kill: Plan, tally: Tally, errors: list[str],
          durations: dict[str, float]) -> str:
    """One trial (module docstring); returns how the victim ended. `durations`: each
    role's last unkilled run, in seconds (updated)."""
    md_url = f"sqlite:///{where}/md.db"
    store_url = f"file://{where}/store"
    md = MetadataStore.open(md_url, create=True)
    for name, partitions, keys in TOPICS:
        md.create_topic(name, partitions, {"cleanup.policy": "compact"} if keys else {})
    md.close()
    base = procs.Work("agent", store_url, md_url, where / "log", topics=TOPICS)
    agent = replace(base, acks=where / "acks-a", tag="a:", records=60, flush_every=10,
                    log=where / "agent.log")
    procs.produce(replace(agent, acks=where / "acks-0", tag="0:", records=30,
                          log=where / "pre.log"))
    compactor = replace(base, role="compactor", rounds=3, log=where / "compactor.log")
    gc = replace(compactor, rounds=1, clock_ahead_ms=AHEAD_MS, log=where / "gc.log")

    ended: dict[str, int | None] = {}
    phase_a = {"agent": agent, "compactor": compactor}
    running = {role: procs.start(replace(w, killpoint=kill.step if kill.victim == role
                                         else "")) for role, w in phase_a.items()}
    _wait(running, kill, ended, durations)
    gc_proc = procs.start(replace(gc, killpoint=kill.step if kill.victim == "gc" else ""))
    _wait({"gc": gc_proc}, kill, ended, durations)

    for role, code in ended.items():
        if code not in (0, procs.KILLED) or (code == procs.KILLED and role != kill.victim):
            log = where / f"{role}.log"
            errors.append(f"{kill.describe()}: {role} exit {code}: "
                          + (log.read_text().splitlines()[0][:300] if log.exists() else ""))
    _verify(where, store_url, md_url, tally)
    # A file store's upload in progress is a temp file beside its key, renamed on close;
    # never listed, so neither GC nor doctor sees one a kill left behind.
    leftovers = [p.name for p in (where / "store").rglob(".upload-*")]
    tally.note("upload_leftovers", len(leftovers), f"{kill.describe()}: {leftovers[:3]}")
    victim_killed = ended[kill.victim] == procs.KILLED
    if kill.step:
        return "step" if victim_killed else "step not reached"
    return "random" if victim_killed else "random too late"


def _wait(running: dict[str, BaseProcess], kill: Plan, ended: dict[str, int | None],
          durations: dict[str, float]) -> None:
    """Wait for the processes; the victim, on a random kill, is killed at its moment."""
    started = time.perf_counter()
    for role, proc in running.items():
        if role == kill.victim and not kill.step:
            proc.join(kill.moment * durations.get(role, FIRST_GUESS_S))
            if proc.is_alive():
                proc.kill()
        proc.join()
        ended[role] = proc.exitcode
        if proc.exitcode == 0:
            durations[role] = time.perf_counter() - started


def _verify(where: Path, store_url: str, md_url: str, tally: Tally) -> None:
    clock = ManualClock(int(time.time() * 1000) + 2 * AHEAD_MS)
    md = MetadataStore.open(md_url, clock=clock)
    store = open_store(store_url)
    try:
        acked = read_acks(where / "acks-0")
        for tp, acks in read_acks(where / "acks-a").items():
            acked.setdefault(tp, []).extend(acks)
        before = read_logs(store, md, PARTITIONS)
        for tp in PARTITIONS:
            check_log(tally, tp, before[tp], acked.get(tp, []), ("0:", "a:"),
                      compacted=tp[0] in COMPACTED)
        config = CompactorConfig()
        recovery = Compactor(store, md, config, clock=clock)
        recovery.run_once(everything=True)
        clock.advance(config.grace_ms + 1)
        recovery.collect_garbage()
        after = read_logs(store, md, PARTITIONS)
        for tp in PARTITIONS:
            if tp[0] in COMPACTED:
                check_compacted(tally, tp, before[tp], after[tp])
            else:
                tally.note("compaction_mismatch", int(after[tp] != before[tp]),
                           f"{tp}: delete-policy log changed by compaction")
        check_objects(tally, store, md)
    finally:
        md.close()
