"""`python3 localstack/launch.py` as a real process: SIGTERM (as Ctrl-C) stops LocalStack
with it, so nothing is left listening or running."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.agent_process import free_port

from .conftest import ROOT, _launcher

WAIT_S = 300.0  # the first run installs LocalStack into localstack/.venv


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True,
                         check=False).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_localstack(tmp_path: Path, sig: signal.Signals) -> None:
    if _launcher().find_python313() is None:
        pytest.skip("LocalStack needs a Python >= 3.13; none on this machine")
    port = free_port()
    out = tmp_path / "out"
    with out.open("wb") as o:
        proc = subprocess.Popen([sys.executable, str(ROOT / "localstack" / "launch.py"),
                                 "--port", str(port), "--data", str(tmp_path / "data"),
                                 "--log", str(tmp_path / "ls.log")], stdout=o,
                                stderr=subprocess.STDOUT)
    children: list[int] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while "LocalStack S3 on" not in out.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, "LocalStack did not start"
            time.sleep(0.2)
        assert proc.poll() is None, out.read_text()
        children = _children(proc.pid)
        assert children and _listening(port)
        proc.send_signal(sig)
        assert proc.wait(60) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            for c in children:  # a launcher that failed its test leaves no LocalStack
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c, signal.SIGKILL)
    assert "LocalStack stopped." in out.read_text()
    assert not [c for c in children if _alive(c)]
    assert not _listening(port)
