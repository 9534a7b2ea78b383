"""Ctrl-C (SIGINT) and SIGTERM during a real `silt produce` process: it stops reading,
waits for the flush in flight, prints the offset of every record committed, says from which
line to resume, and exits 130; resuming from that line duplicates nothing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from harness.agent_process import REPO

WAIT_S = 120.0
LINES = 300_000
FIRST_PART = 20_000  # lines fed before the signal
RESUME = re.compile(r"interrupted: (\d+) lines committed; resume from line (\d+)")


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SILT_")}
    return {**clean, "PYTHONPATH": str(REPO), "SILT_STORE": f"file://{tmp_path}/objects",
            "SILT_METADATA": f"sqlite:///{tmp_path}/md.db"}


def silt(env: dict[str, str], *args: str, stdin: IO[bytes] | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "cli", *args], env=env, stdin=stdin,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def produce(env: dict[str, str], out: Path, err: Path, *args: str,
            stdin: int | None = None) -> subprocess.Popen[bytes]:
    with out.open("wb") as o, err.open("wb") as e:
        return subprocess.Popen([sys.executable, "-m", "cli", "produce", "t", *args], env=env,
                                stdin=stdin, stdout=o, stderr=e)


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def topic_records(env: dict[str, str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in silt(env, "consume", "t").splitlines()]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_file_prints_committed_offsets_and_resume_line(
        tmp_path: Path, sig: signal.Signals) -> None:
    env = _env(tmp_path)
    silt(env, "topics", "create", "t", "--partitions", "4")
    src = tmp_path / "big.jsonl"
    with src.open("w") as f:
        for i in range(LINES):
            if i % 1000 == 999:
                f.write("\n")  # blank lines count as input lines
            f.write(json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n")
    total_lines = lines_in(src)
    # The file reaches produce through a FIFO fed in two parts, the second only after the
    # signal: the signal lands mid-file however fast produce runs.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    signalled = threading.Event()

    def feed() -> None:
        with src.open("rb") as f, contextlib.suppress(BrokenPipeError), fifo.open("wb") as w:
            for i, line in enumerate(f):
                if i == FIRST_PART:
                    w.flush()
                    signalled.wait(WAIT_S)
                w.write(line)

    feeder = threading.Thread(target=feed)
    feeder.start()
    out, err = tmp_path / "out", tmp_path / "err"
    try:
        proc = produce(env, out, err, "--file", str(fifo))
        wait_until(lambda: lines_in(out) >= 1000 or proc.poll() is not None, "first offsets")
        proc.send_signal(sig)
        assert proc.wait(WAIT_S) == 130, err.read_text()
    finally:
        signalled.set()
        feeder.join(WAIT_S)
    match = RESUME.search(err.read_text())
    assert match, err.read_text()
    committed, resume = int(match[1]), int(match[2])
    assert resume <= FIRST_PART + 1 < total_lines  # it stopped reading at the signal

    acks = [json.loads(line) for line in out.read_text().splitlines()]
    stored = topic_records(env)
    assert len(acks) == committed == len(stored)
    assert {(a["partition"], a["offset"]) for a in acks} == {
        (r["partition"], r["offset"]) for r in stored}
    # The records committed are exactly the non-blank lines before the resume line.
    before = [json.loads(line)["value"] for line in
              src.read_text().splitlines()[:resume - 1] if line.strip()]
    assert sorted(str(r["value"]) for r in stored) == sorted(before)

    with subprocess.Popen(["tail", "-n", f"+{resume}", str(src)],
                          stdout=subprocess.PIPE) as tail:
        silt(env, "produce", "t", stdin=tail.stdout)
    values = [str(r["value"]) for r in topic_records(env)]
    assert len(values) == len(set(values)) == LINES


def test_signal_while_waiting_for_stdin(tmp_path: Path) -> None:
    """A signal while stdin has no more data yet interrupts the read: nothing is lost."""
    env = _env(tmp_path)
    silt(env, "topics", "create", "t", "--partitions", "2")
    out, err = tmp_path / "out", tmp_path / "err"
    proc = produce(env, out, err, "--linger-ms", "10", stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(b"".join(json.dumps({"key": f"k{i}", "value": f"v{i}"}).encode() + b"\n"
                              for i in range(50)))
    proc.stdin.flush()
    wait_until(lambda: lines_in(out) == 50 or proc.poll() is not None, "50 offsets")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(WAIT_S) == 130, err.read_text()
    proc.stdin.close()
    assert "interrupted: 50 lines committed; resume from line 51" in err.read_text()
    assert len(topic_records(env)) == 50
