"""A confluent-kafka group consumer as a child process, so a test can stop it cleanly
(SIGTERM: `close()`, which leaves the group unless it is a static member) or SIGKILL it.

`python -m tests.protocol.group_consumer SPEC_JSON LOG` subscribes to one topic and logs,
one flushed line each, `<CLOCK_MONOTONIC ns> <kind> <fields>`:
  A p,p  assigned (the increment under cooperative-sticky, the whole assignment under eager)
  R p,p  revoked        L p,p  lost
  C p o  consumed record (p, o), logged before it is committed
  K p n  committed: the synchronous commit of next offset n on p returned without error
  E ...  an error (client error callback, failed commit)
  X      closed cleanly
The clock is system-wide, so a test orders lines of several consumers and its own actions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from harness.agent_process import REPO

SCRIPT = "tests.protocol.group_consumer"


@dataclass(frozen=True)
class Line:
    t_ns: int
    kind: str
    fields: str

    def partitions(self) -> set[int]:
        return {int(p) for p in self.fields.split(",") if p}

    def offset(self) -> tuple[int, int]:
        p, o = self.fields.split()
        return int(p), int(o)


@dataclass
class GroupConsumer:
    """One consumer process: `spec` holds `config` (librdkafka settings), `topic`,
    `commit` (commit each record synchronously, default true) and `sleep_ms` (a pause per
    record, so a test can act while records remain)."""

    name: str
    spec: dict[str, Any]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> GroupConsumer:
        with self.log_path.with_suffix(".err").open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", SCRIPT, json.dumps(self.spec), str(self.log_path)],
                cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=err, stderr=subprocess.STDOUT)
        return self

    def lines(self) -> list[Line]:
        """The complete lines logged so far."""
        if not self.log_path.exists():
            return []
        text = self.log_path.read_text()
        out = []
        for raw in text.split("\n")[:-1]:  # the last piece is "" or a line being written
            t, kind, *rest = raw.split(" ", 2)
            out.append(Line(int(t), kind, rest[0] if rest else ""))
        return out

    def assignment(self) -> set[int]:
        """The partitions held now, as the callbacks logged them."""
        held: set[int] = set()
        for line in self.lines():
            if line.kind == "A":
                held |= line.partitions()
            elif line.kind in ("R", "L"):
                held -= line.partitions()
        return held

    def consumed(self) -> list[tuple[int, int, int]]:
        """(time, partition, offset) of each record consumed, in order."""
        return [(x.t_ns, *x.offset()) for x in self.lines() if x.kind == "C"]

    def commits(self) -> list[tuple[int, int, int]]:
        """(time, partition, next offset) of each commit that returned without error."""
        return [(x.t_ns, *x.offset()) for x in self.lines() if x.kind == "K"]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send `sig` and wait for the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def errors(self) -> str:
        """What the process wrote to stderr (a traceback if it failed)."""
        path = self.log_path.with_suffix(".err")
        return path.read_text(errors="replace") if path.exists() else ""


def stop_all(consumers: Iterable[GroupConsumer]) -> None:
    """Kill whatever still runs (test cleanup)."""
    for c in consumers:
        if c.proc is not None and c.proc.poll() is None:
            c.stop(signal.SIGKILL)


def wait_until(done: Callable[[], bool], timeout: float, what: str,
               describe: Callable[[], str] = lambda: "") -> None:
    """Poll `done` every 50 ms; AssertionError naming `what` if it is still false after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{describe()}")
        time.sleep(0.05)


def _run(spec: dict[str, Any], log_path: str) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    stopping = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    with open(log_path, "a", buffering=1) as log:  # line-buffered: each line reaches the file

        def write(kind: str, *fields: object) -> None:
            log.write(" ".join([str(time.monotonic_ns()), kind, *map(str, fields)]) + "\n")

        def parts(tps: list[TopicPartition]) -> str:
            return ",".join(str(tp.partition) for tp in tps)

        def on_error(err: KafkaError) -> None:
            write("E", err)

        consumer = Consumer({**spec["config"], "error_cb": on_error})
        consumer.subscribe(
            [spec["topic"]],
            on_assign=lambda c, tps: write("A", parts(tps)),
            on_revoke=lambda c, tps: write("R", parts(tps)),
            on_lost=lambda c, tps: write("L", parts(tps)))
        pause = spec.get("sleep_ms", 0) / 1000
        while not stopping:
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error() is not None:
                write("E", msg.error())
                continue
            write("C", msg.partition(), msg.offset())
            if pause:
                time.sleep(pause)
            if not spec.get("commit", True):
                continue
            try:
                done = consumer.commit(message=msg, asynchronous=False)
            except KafkaException as e:
                write("E", "commit", e)
                continue
            for tp in done or []:
                if tp.error is None:
                    write("K", tp.partition, tp.offset)
                else:
                    write("E", "commit", tp.partition, tp.error)
        consumer.close()
        write("X")


if __name__ == "__main__":
    _run(json.loads(sys.argv[1]), sys.argv[2])
