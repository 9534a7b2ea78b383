"""Agent and compactor processes for the chaos suites, forked from a pre-imported server.

A trial starts a few short-lived processes. A fresh interpreter importing what `silt`
imports took 2.5 s on a loaded 2-core machine; a forkserver (`multiprocessing`'s) imports
siltstream once and forks each process from that state: 28 ms a process, start to exit.
Each one runs a `Work` (picklable): arms its kill point (faults/killpoints.py), then
produces or compacts against the store and metadata URLs given, and exits 0 (or 1: the error
on the first line of `Work.log`, then its traceback). An agent writes one
line per acknowledged record to `Work.acks` (`topic partition offset key value`), after its
flush returned, so the file holds exactly the records a client was told are stored.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import traceback
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path

PRELOAD = ["agent", "compactor", "metadata", "objectstore", "fileformat", "faults.killpoints",
           "faults.procs"]
KILLED = -signal.SIGKILL  # a Process's exitcode after SIGKILL

_context: ForkServerContext | None = None


def context() -> ForkServerContext:
    """The forkserver context, its server preloading siltstream (started on first use)."""
    global _context
    if _context is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        _context = ctx
    return _context


@dataclass(frozen=True, slots=True)
class Work:
    """What one process does.

    role `agent`: `records` records round-robin over `topics` (each `(name, partitions,
    keys)`; keys 0: no key), a flush every `flush_every`; values are `<tag>topic:partition:n`,
    unique. role `compactor`: `rounds` compaction rounds (`run_once(everything=True)`:
    retention, every job proposed, GC), its clock `clock_ahead_ms` ahead of the system's
    (leases expired and GC grace passed for the process's view: a later recovery)."""

    role: str
    store_url: str
    metadata_url: str
    log: Path
    killpoint: str = ""
    acks: Path | None = None
    tag: str = ""
    topics: tuple[tuple[str, int, int], ...] = ()
    records: int = 0
    flush_every: int = 10
    rounds: int = 1
    clock_ahead_ms: int = 0
    lease_ms: int = 60_000
    grace_ms: int = 60_000


def start(work: Work) -> BaseProcess:
    """Fork a process running `work` from the forkserver."""
    proc = context().Process(target=run, args=(work,), daemon=True)
    proc.start()
    return proc


def run(work: Work) -> None:
    """A process's body: arm, work, exit 0; on an error its traceback goes to `work.log`."""
    import logging

    logging.disable(logging.CRITICAL)  # failures are judged by the data, tracebacks logged
    try:
        if work.killpoint:
            from faults.killpoints import arm

            arm(work.killpoint)
        if work.role == "agent":
            produce(work)
        elif work.role == "compactor":
            _compact(work)
        else:
            raise ValueError(f"unknown role {work.role!r}")
    except BaseException as exc:
        summary = " ".join("".join(traceback.format_exception_only(exc)).split())
        work.log.write_text(f"{summary}\n{traceback.format_exc()}")
        os._exit(1)


def produce(work: Work) -> None:
    from agent import Agent, AgentConfig
    from metadata import MetadataStore
    from objectstore import open_store

    assert work.acks is not None
    md = MetadataStore.open(work.metadata_url)
    fd = os.open(work.acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    with Agent(open_store(work.store_url), md, AgentConfig(linger_ms=600_000)) as agent:
        pending = []
        for n in range(work.records):
            topic, partitions, keys = work.topics[n % len(work.topics)]
            partition = (n // len(work.topics)) % partitions
            key = None if not keys else b"k%d" % (n % keys)
            value = f"{work.tag}{topic}:{partition}:{n}"
            pending.append((topic, partition, key, value,
                            agent.produce(topic, partition, key, value.encode())))
            if len(pending) == work.flush_every or n == work.records - 1:
                agent.flush()
                # One write per flush, whole lines: a kill never leaves half an ack.
                lines = "".join(f"{t} {p} {f.result()} {(k or b'-').decode()} {v}\n"
                                for t, p, k, v, f in pending)
                os.write(fd, lines.encode())
                pending = []
    os.close(fd)
    md.close()


def _compact(work: Work) -> None:
    import time

    from clock import SYSTEM_CLOCK, Clock, ManualClock
    from compactor import Compactor, CompactorConfig
    from metadata import MetadataStore
    from objectstore import open_store

    clock: Clock = SYSTEM_CLOCK if not work.clock_ahead_ms else ManualClock(
        int(time.time() * 1000) + work.clock_ahead_ms)
    md = MetadataStore.open(work.metadata_url, clock=clock)
    compactor = Compactor(open_store(work.store_url), md,
                          CompactorConfig(lease_ms=work.lease_ms, grace_ms=work.grace_ms),
                          clock=clock)
    for _ in range(work.rounds):
        compactor.run_once(everything=True)
    md.close()
