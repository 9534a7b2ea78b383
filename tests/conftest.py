"""Shared fixtures: a recording moto S3 server (and a fault-injecting proxy in front of
it), PostgreSQL databases, and the CI rule that tests needing a real server never silently
skip when SILT_REQUIRE_SERVERS is set."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from clock import ManualClock
from objectstore.testserver import RecordingMotoServer

if TYPE_CHECKING:
    from faults.proxy import FaultProxy

POSTGRES_ADMIN_URL = os.environ.get(
    "SILT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
SERVER_MARKERS = ("postgres", "s3server")


def _require_servers() -> bool:
    return os.environ.get("SILT_REQUIRE_SERVERS", "").lower() in ("1", "true", "yes")


_skipped_server_tests: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and any(item.get_closest_marker(m) for m in SERVER_MARKERS):
        _skipped_server_tests.append(item.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _require_servers() and _skipped_server_tests:
        print(
            "\nSILT_REQUIRE_SERVERS is set but these server-backed tests skipped:\n  "
            + "\n  ".join(_skipped_server_tests)
        )
        session.exitstatus = 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests using the moto or PostgreSQL fixtures get the server markers automatically."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "moto_server" in fixtures or "s3_url" in fixtures:
            item.add_marker(pytest.mark.s3server)
        if "postgres_url" in fixtures:
            item.add_marker(pytest.mark.postgres)
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            params = " ".join(str(v) for v in callspec.params.values())
            if "postgres" in params:
                item.add_marker(pytest.mark.postgres)
            if "s3" in params:
                item.add_marker(pytest.mark.s3server)


# --------------------------------------------------------------------------- S3 (moto)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[RecordingMotoServer]:
    """One recording moto server for the session, on 127.0.0.1 with an OS-chosen port."""
    server = RecordingMotoServer().start()
    old = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    yield server
    server.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)


@pytest.fixture
def s3_url(moto_server: RecordingMotoServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the moto server; AWS_* variables point boto3 at it."""
    import boto3

    moto_server.reset()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = f"silt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_server.endpoint_url).create_bucket(Bucket=bucket)
    moto_server.clear_log()
    return f"s3://{bucket}/prefix"


# --------------------------------------------------------------------------- PostgreSQL


def _pg_available() -> bool:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(
            POSTGRES_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://", 1)
        )
        with engine.connect():
            pass
        engine.dispose()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def _pg_ok() -> bool:
    return _pg_available()


@pytest.fixture
def postgres_url(_pg_ok: bool) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    if not _pg_ok:
        pytest.skip(f"PostgreSQL not reachable at {POSTGRES_ADMIN_URL}")
    import sqlalchemy as sa

    admin = sa.create_engine(
        POSTGRES_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://", 1),
        isolation_level="AUTOCOMMIT",
    )
    name = f"silt_t_{uuid.uuid4().hex[:16]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path: os.PathLike[str]) -> str:
    return f"sqlite:///{tmp_path}/metadata.db"


@pytest.fixture(params=["sqlite", "postgres"])
def metadata_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """Parametrised over both metadata backends."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/metadata.db"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def clock() -> ManualClock:
    """The one fake clock (moves only when told to), shared by every suite that needs it."""
    return ManualClock()


# --------------------------------------------------------------------------- S3 faults


@pytest.fixture
def fault_proxy(s3_url: str, moto_server: RecordingMotoServer,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """A fault-injecting proxy (faults/proxy.py) in front of the moto server, injecting
    nothing until the test calls `configure(rate=..., seed=...)`; AWS_ENDPOINT_URL points
    at it, so stores opened on `s3_url` from here on go through it."""
    from faults.proxy import FaultProxy

    with FaultProxy(moto_server.endpoint_url) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint_url)
        yield proxy
