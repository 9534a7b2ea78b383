#!/usr/bin/env python3
"""Run LocalStack's S3 without Docker (host mode), for machines with no Docker engine.

    python localstack/launch.py [--port 4566] [--data DIR] [--log FILE]

Creates `localstack/.venv` with a Python >= 3.13 (LocalStack 2026.x fails on 3.11/3.12 with
a misleading "No component plugins found"), installs the pinned runtime into it, starts
`python -m localstack.runtime.main` with S3 only on 127.0.0.1, waits until S3 answers, and
prints the environment to point siltstream at it. It keeps running until Ctrl-C or SIGTERM,
which stop LocalStack (its whole process group) before it exits 0.
Importable: `start(port, data_dir, log_path)` returns the process, `stop(proc)` ends it
(used by the tests).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv"
# What localstack/.venv holds: requirements.in's pins resolved by `make lock`.
LOCK = HERE / "requirements.lock"
BUCKET_ENV = "SILT_LOCALSTACK_BUCKET"


def find_python313() -> str | None:
    """A Python >= 3.13 interpreter: pyenv's versions, then PATH (pyenv shims that are
    not activated fail, so they are skipped)."""
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for path in sorted(glob.glob(f"{pyenv_root}/versions/3.1[3-9]*/bin/python3"), reverse=True):
        return path
    for name in ("python3.14", "python3.13"):
        found = shutil.which(name)
        if found and "/shims/" not in found:
            return found
    return None


def ensure_venv() -> Path:
    """The LocalStack venv's python, created on first use and (re)installed to the exact
    versions of requirements.lock whenever the lock changes."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".installed"
    lock = LOCK.read_text()
    # One installer at a time: launchers started together wait for the first one's install.
    with open(HERE / ".venv.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if python.exists() and stamp.exists() and stamp.read_text() == lock:
            return python
        return _install(python, stamp, lock)


def _install(python: Path, stamp: Path, lock: str) -> Path:
    """Create the venv if need be and install the lock into it (the caller holds the lock)."""
    base = find_python313()
    if base is None:
        raise RuntimeError("LocalStack needs Python >= 3.13 (none found on PATH or in pyenv)")
    if not python.exists():
        subprocess.run([base, "-m", "venv", str(VENV)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PIP_CONSTRAINT"}  # the project's
    uv = Path(sys.executable).with_name("uv")  # the project venv's installer, when there
    installer = ([str(uv), "pip", "install", "--python", str(python)] if uv.exists()
                 else [str(python), "-m", "pip", "install"])
    subprocess.run([*installer, "-q", "-r", str(LOCK)], check=True, env=env)
    stamp.write_text(lock)
    return python


def wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 90) -> None:
    """Until LocalStack's health endpoint reports S3 available."""
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{port}/_localstack/health"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"LocalStack exited with code {proc.returncode}")
        try:
            body = urllib.request.urlopen(url, timeout=2).read().decode()
            if '"s3": "available"' in body or '"s3": "running"' in body:
                return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"LocalStack S3 did not become ready on port {port} in {timeout}s")


def start(port: int, data_dir: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """Start LocalStack S3 in host mode; returns once S3 answers."""
    python = ensure_venv()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SERVICES": "s3",
        "GATEWAY_LISTEN": f"127.0.0.1:{port}",
        "DISABLE_EVENTS": "1",
        "OVERRIDE_IN_DOCKER": "0",
        "FILESYSTEM_ROOT": str(data_dir),
        "SKIP_SSL_CERT_DOWNLOAD": "1",
        "LOCALSTACK_HOST": f"127.0.0.1:{port}",
    }
    with log_path.open("wb") as log:  # the child keeps its own handle
        # Its own session: stop() can end LocalStack and anything it started, as a group.
        proc = subprocess.Popen([str(python), "-m", "localstack.runtime.main"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, cwd=data_dir,
                                start_new_session=True)
    try:
        wait_ready(port, proc)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM LocalStack's process group, SIGKILL it if it outlives `timeout`; the exit
    code."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):  # the group is gone already
            os.killpg(proc.pid, sig)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM takes Ctrl-C's path: LocalStack is stopped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=4566)
    parser.add_argument("--data", type=Path, default=HERE / "data")
    parser.add_argument("--log", type=Path, default=HERE / "localstack.log")
    args = parser.parse_args()
    # Both set explicitly: a launcher started from a script's background job inherits
    # SIGINT ignored, and Ctrl-C / `kill -INT` must still stop LocalStack.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        proc = start(args.port, args.data, args.log)  # stopped by start() if interrupted
    except KeyboardInterrupt:
        return 0
    try:  # a signal from here on stops LocalStack, even one during the prints
        print(f"LocalStack S3 on http://127.0.0.1:{args.port} (log: {args.log}).")
        print("Point siltstream at it:")
        print(f"  export AWS_ENDPOINT_URL=http://127.0.0.1:{args.port} AWS_ACCESS_KEY_ID=test"
              " AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1")
        print("  export SILT_STORE=s3://silt/data"
              " SILT_METADATA=sqlite:///./silt-data/localstack/metadata.db")
        print("  silt init --create-bucket   # the bucket, the metadata, the store's marker")
        sys.stdout.flush()
        return proc.wait()
    except KeyboardInterrupt:
        stop(proc)
        print("LocalStack stopped.")
        return 0


if __name__ == "__main__":
    sys.exit(main())
