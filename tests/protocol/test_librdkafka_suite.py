"""librdkafka's own regression tests (a fast subset of `make compat`, docs/compatibility.md)
against `silt agent`: the C test-runner built from the pinned source (harness.compat.build;
`make test` builds it first through `make compat-build`), one test number per case, the
scenarios' agents shared by the module. The subset is the tests that take seconds, across
produce, consume, offsets, groups and admin, so a regression one of them catches fails CI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.compat import build, suite
from harness.compat.run import Clusters, plan, run_number

# Test numbers and what they cover; each ran in seconds in the last full run.
FAST = {
    "0001": "many producer instances, produce and wait for delivery",
    "0002": "producing to an unknown partition fails with UNKNOWN_PARTITION",
    "0003": "message.max.bytes: an oversized message is refused",
    "0005": "order of delivered messages",
    "0007": "a topic auto-created by produce",
    "0008": "acks 0, 1 and all",
    "0011": "batches, with KIP-467 record errors (10 bad records of 100)",
    "0012": "produce then consume per partition and from one queue",
    "0013": "null messages",
    "0017": "the four compression codecs",
    "0019": "ListGroups of a live consumer group",
    "0021": "topic handles destroyed while producing",
    "0022": "batch consume",
    "0031": "ListOffsets: earliest and latest",
    "0034": "auto.offset.reset",
    "0035": "ApiVersions",
    "0036": "a partial fetch (a message split by max bytes)",
    "0044": "CreatePartitions seen by a producer",
    "0054": "ListOffsets by timestamp",
    "0056": "a balanced consumer group, multi-threaded",
    "0057": "invalid topic names refused",
    "0063": "the cluster id and controller id",
    "0070": "null and empty keys and values",
    "0073": "headers produced and consumed",
    "0082": "fetch.max.bytes",
    "0090": "an idempotent producer",
    "0099": "offset commit metadata",
    "0111": "topics created after a subscription (auto-create off)",
    "0112": "an assignment of an unknown partition",
}
TIME_LIMIT_S = 120.0


def _required() -> bool:
    return (os.environ.get("SILT_REQUIRE_SERVERS", "").lower() in ("1", "true", "yes")
            or bool(os.environ.get("CI")))


@pytest.fixture(scope="module")
def runner_tests() -> Path:
    """librdkafka's built tests/ directory (built now if `make compat-build` did not)."""
    try:
        return build.ensure_built(say=lambda _: None)
    except build.SourceMissing as e:
        if _required():
            pytest.fail(f"{e} (CI must run librdkafka's tests)")
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    agents = Clusters(tmp_path_factory.mktemp("librdkafka"))
    yield agents
    agents.close()


@pytest.mark.parametrize("number", sorted(FAST))
def test_librdkafka(number: str, runner_tests: Path, clusters: Clusters) -> None:
    entries = suite.broker_tests((runner_tests / "test.c").read_text())
    runs = plan(entries, {number})
    assert runs, f"{number} is not a broker test run here"
    results = [result for n, scenario, group in runs
               for result in run_number(runner_tests, clusters, n, scenario, group,
                                        TIME_LIMIT_S, clusters.work / "logs")]
    failed = [f"{r.name}: {r.status}: {r.detail}" for r in results if r.status != "pass"]
    assert not failed, f"{FAST[number]}; runner log in {clusters.work / 'logs'}:\n" + "\n".join(
        failed)
