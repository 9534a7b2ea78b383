"""The crash-once metadata store: the first compaction commit crashes (before or after it
commits), every later one goes through; "once" is a marker file shared across processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import Agent, AgentConfig
from compactor import Compactor
from faults import AFTER_COMMIT, BEFORE_COMMIT, CrashOnce, InjectedCrash
from metadata import MetadataStore
from objectstore import ObjectStore, open_store


def _populated(tmp_path: Path, crash: CrashOnce) -> tuple[ObjectStore, MetadataStore]:
    url = f"sqlite:///{tmp_path}/md.db"
    MetadataStore.open(url, create=True).close()  # the opener opens existing metadata
    md = crash(url)
    md.create_topic("s", 2, {"cleanup.policy": "compact"})
    store = open_store("memory://crash-once")
    with Agent(store, md, AgentConfig(linger_ms=3_600_000)) as agent:
        for f in range(2):
            agent.produce("s", f % 2, b"k", b"v")
            agent.flush()
    return store, md


@pytest.mark.parametrize("when", [BEFORE_COMMIT, AFTER_COMMIT])
def test_first_commit_crashes_past_run_job(tmp_path: Path, when: str) -> None:
    marker = tmp_path / "crashed"
    store, md = _populated(tmp_path, CrashOnce(when, marker))
    compactor = Compactor(store, md)
    (spec,) = compactor.plan(everything=True).jobs
    with pytest.raises(InjectedCrash):
        compactor.run_job(spec)  # a BaseException: run_job's error handling lets it pass
    assert marker.read_text() == when
    committed = md.list_jobs(state="committed")
    assert len(committed) == (1 if when == AFTER_COMMIT else 0)
    md.close()


def test_later_commits_go_through(tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    marker.write_text(BEFORE_COMMIT)  # an earlier attempt already crashed
    store, md = _populated(tmp_path, CrashOnce(BEFORE_COMMIT, marker))
    (report,) = Compactor(store, md).run_once(everything=True)
    assert report.outcome == "committed"
    md.close()


def test_unknown_crash_point_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="crash point"):
        CrashOnce("mid_commit", tmp_path / "x")
