"""The metrics port (endpoints, readiness, a taken port), the metrics settings, and the hooks
whose values the end-to-end test cannot force: S3 request failures reported per HTTP
request, commit outcomes, uncleanable partitions, the agent's readiness."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from prometheus_client import REGISTRY

import telemetry
from agent import AgentConfig
from agent.protocol.context import ServerContext
from agent.protocol.health import ready as agent_ready
from compactor import Compactor, CompactorConfig
from compactor.health import observe_round
from compactor.health import ready as compactor_ready
from metadata import MetadataStore
from metadata.config import MetadataConfig
from metadata.engine import make_engine
from metadata.errors import UnknownTopicError
from objectstore import open_store
from planner import PlannerConfig
from settings import SettingError
from settings.load import load_settings

from ..metadata.metadata_helpers import chunk, commit


def get(port: int, path: str, accept: str = "") -> tuple[int, str, str]:
    """(status, content type, body) of GET http://127.0.0.1:port/path."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_endpoints_and_readiness() -> None:
    why: list[str | None] = ["starting"]
    with telemetry.MetricsServer("127.0.0.1:0", lambda: why[0]) as server:
        assert server.address is not None and telemetry.serving()
        port = server.address[1]
        assert get(port, "/healthz")[::2] == (200, "ok\n")
        assert get(port, "/readyz")[::2] == (503, "not ready: starting\n")
        why[0] = None
        assert get(port, "/readyz")[::2] == (200, "ready\n")
        assert get(port, "/elsewhere")[0] == 404
        status, content_type, body = get(port, "/metrics")
        assert status == 200 and content_type.startswith("text/plain")
        assert "# TYPE silt_compaction_jobs_total counter" in body
        assert 'silt_compaction_jobs_total{outcome="lost"}' in body
        status, content_type, body = get(port, "/metrics",
                                         "application/openmetrics-text; version=1.0.0")
        assert content_type.startswith("application/openmetrics-text")
        assert body.endswith("# EOF\n")
    assert server.address is None and not telemetry.serving()
    with pytest.raises(OSError):  # the port is closed
        get(port, "/healthz")


def test_a_failing_readiness_check_is_503_with_its_error() -> None:
    def check() -> str | None:
        raise ConnectionRefusedError("metadata store down\nsecond line")

    with telemetry.MetricsServer("127.0.0.1:0", check) as server:
        assert server.address is not None
        assert get(server.address[1], "/readyz")[::2] == (
            503, "not ready: ConnectionRefusedError: metadata store down\n")


def test_no_listener_opens_no_port_and_a_taken_port_is_one_line() -> None:
    off = telemetry.MetricsServer("").start()
    assert off.address is None and not telemetry.serving()
    off.stop()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SettingError, match=rf"cannot serve metrics on 127\.0\.0\.1:{port}"
                                               r" \(metrics\.listeners\): "):
            telemetry.MetricsServer(f"127.0.0.1:{port}").start()
    assert not telemetry.serving()


def test_metrics_settings_per_service(tmp_path: Path) -> None:
    assert AgentConfig().metrics_listeners == CompactorConfig().metrics_listeners == ""
    env = {"SILT_AGENT_METRICS_LISTENERS": "0.0.0.0:9464",
           "SILT_COMPACTOR_METRICS_LISTENERS": "[::1]:9465",
           "SILT_AGENT_METRICS_REFRESH_INTERVAL_MS": "500"}
    s = load_settings(env=env)
    assert (s.agent.metrics_listeners, s.compactor.metrics_listeners) == ("0.0.0.0:9464",
                                                                          "[::1]:9465")
    assert s.agent.metrics_refresh_interval_ms == 500
    with pytest.raises(SettingError, match=r"invalid setting agent\.metrics\.listeners=9464"
                                           r" .*must be HOST:PORT or empty"):
        load_settings(env={"SILT_AGENT_METRICS_LISTENERS": "9464"})
    with pytest.raises(SettingError, match=r"agent\.metrics\.refresh\.interval\.ms"):
        AgentConfig(metrics_refresh_interval_ms=0)


@pytest.mark.parametrize("wrapped", [True, False])
def test_s3_reports_each_failed_request(s3_url: str, wrapped: bool) -> None:
    """Through the wrappers (counting(retrying(S3))) or on the backend itself."""
    store = open_store(s3_url) if wrapped else open_store(s3_url, counting=False, retry=None)
    failures: list[tuple[str, str]] = []
    requests: list[str] = []
    store.set_failure_listener(lambda op, error: failures.append((op, error)))
    store.set_request_listener(lambda op, sent, received: requests.append(op) if op else None)
    store.put("present", b"x" * 10)
    assert store.get("present") == b"x" * 10
    with pytest.raises(FileNotFoundError):
        store.size("absent")
    with pytest.raises(FileNotFoundError):
        store.get("absent")
    assert requests == ["PUT", "GET", "HEAD", "GET"]
    assert failures == [("HEAD", "FileNotFoundError"), ("GET", "FileNotFoundError")]


def test_s3_failures_reach_the_metric(s3_url: str) -> None:
    store = open_store(s3_url)
    store.set_failure_listener(telemetry.store_failure)
    before = sample("silt_objectstore_request_failures_total", type="HEAD",
                    error="FileNotFoundError")
    with pytest.raises(FileNotFoundError):
        store.size("absent")
    assert sample("silt_objectstore_request_failures_total", type="HEAD",
                  error="FileNotFoundError") == before + 1


def test_commit_outcomes_by_kind(tmp_path: Path) -> None:
    def count(outcome: str) -> float:
        return sample("silt_metadata_commit_duration_seconds_count", kind="topics",
                      outcome=outcome)

    ok, refused = count("ok"), count("refused")
    with MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True) as md:
        md.create_topic("t", 1)
        md.add_partitions("t", 2)
        with pytest.raises(UnknownTopicError):
            md.delete_topic("absent")
    assert (count("ok"), count("refused")) == (ok + 1, refused + 1)


def test_a_partition_is_uncleanable_from_a_failed_job_until_one_commits() -> None:
    def uncleanable(topic: str) -> float | None:
        return REGISTRY.get_sample_value("silt_compaction_uncleanable_partitions",
                                         {"topic": topic})

    telemetry.planned(0.0, {"u": (0.5, 10.0), "v": (0.0, 0.0)})
    assert (uncleanable("u"), uncleanable("v")) == (0.0, 0.0)
    telemetry.compaction_job("failed", 1.0, 10, 0, 0, 0, [("u", 0), ("u", 1), ("v", 0)])
    assert (uncleanable("u"), uncleanable("v")) == (2.0, 1.0)
    telemetry.compaction_job("lost", 1.0, 10, 0, 0, 0, [("u", 0)])  # says nothing
    assert uncleanable("u") == 2.0
    telemetry.compaction_job("committed", 1.0, 10, 5, 3, 1, [("u", 1), ("v", 0)])
    assert (uncleanable("u"), uncleanable("v")) == (1.0, 0.0)
    telemetry.planned(1.0, {"v": (0.0, 0.0)})  # u is no longer compacted: gone
    assert (uncleanable("u"), uncleanable("v")) == (None, 0.0)


def test_agent_is_ready_while_registered_and_not_stopping() -> None:
    reg = SimpleNamespace(info=None)
    ctx = SimpleNamespace(stopping=False, registration=None)
    assert agent_ready(cast(ServerContext, ctx)) == "not registered in the agent registry"
    ctx.registration = reg
    assert agent_ready(cast(ServerContext, ctx)) == "not registered in the agent registry"
    reg.info = object()
    assert agent_ready(cast(ServerContext, ctx)) is None
    ctx.stopping = True
    assert agent_ready(cast(ServerContext, ctx)) == "shutting down"


def test_compactor_is_ready_while_the_metadata_store_answers(tmp_path: Path) -> None:
    with MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True) as md:
        assert compactor_ready(md) is None
    url = "postgresql://postgres@127.0.0.1:1/nothing"  # nobody listens on port 1
    down = MetadataStore(make_engine(url), url, md.clock, MetadataConfig())
    with telemetry.MetricsServer("127.0.0.1:0", lambda: compactor_ready(down)) as server:
        assert server.address is not None
        status, _, body = get(server.address[1], "/readyz")
        assert status == 503 and body.startswith("not ready: OperationalError: ")
        assert body.count("\n") == 1
    down.close()


def test_a_round_sets_live_data_per_level_and_the_gc_backlog(tmp_path: Path) -> None:
    with MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True) as md:
        md.create_topic("t", 2, {"cleanup.policy": "compact"})
        commit(md, "a", [chunk("t", 0), chunk("t", 1)])
        commit(md, "b", [chunk("t", 0)])
        md.abandon_file(md.register_pending_file("c"))
        assert md.stats(levels=False).levels == ()  # only the files per state are read
        assert md.stats(levels=False).files_by_state == md.stats().files_by_state
        _, snap = Compactor(open_store("memory://round"), md).snapshot()
        observe_round(md, snap, md.clock.now_ms(), PlannerConfig())
    assert (sample("silt_live_files", level="0"), sample("silt_live_bytes", level="0"),
            sample("silt_live_segments", level="0")) == (2, 2000, 3)
    assert (sample("silt_gc_backlog_files", state="abandoned"),
            sample("silt_gc_backlog_files", state="retired")) == (1, 0)
    assert REGISTRY.get_sample_value("silt_compaction_max_dirty_ratio", {"topic": "t"}) == 0


def test_metrics_port_behind_tls_and_basic_auth(tmp_path: Path) -> None:
    """With metrics.ssl.* the port speaks TLS only; with metrics.basic.auth.* /metrics asks
    for the user and password (the probes stay open)."""
    import base64
    import ssl

    from harness.certs import CertificateAuthority

    ca = CertificateAuthority(tmp_path / "certs")
    pem = ca.issue("metrics", "CN=localhost", server=True)
    secret = tmp_path / "metrics.pw"
    secret.write_text("sc4pe\n")
    security = telemetry.MetricsSecurity(str(pem.cert), str(pem.key), "prom", str(secret))
    context = ssl.create_default_context(cafile=str(ca.path))

    def fetch(port: int, path: str, auth: str | None) -> int:
        headers = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} \
            if auth else {}
        req = urllib.request.Request(f"https://localhost:{port}{path}", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10, context=context) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    with telemetry.MetricsServer("127.0.0.1:0", security=security) as server:
        assert server.address is not None
        port = server.address[1]
        assert fetch(port, "/metrics", "prom:sc4pe") == 200
        assert fetch(port, "/metrics", "prom:wrong") == 401
        assert fetch(port, "/metrics", None) == 401
        assert fetch(port, "/healthz", None) == 200
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP: closed
            get(port, "/healthz")
