"""The concurrency suite, bounded: agents and compactors at once on PostgreSQL, and the
overlap and compacted-twice checks' own teeth."""

from __future__ import annotations

from pathlib import Path

from agent import Agent, AgentConfig
from faults.check import Tally
from faults.suites import concurrency
from metadata import MetadataStore
from objectstore import open_store


def test_agents_and_compactors_at_once_keep_every_promise(postgres_admin_url: str) -> None:
    figures = concurrency.run(trials=2, seed=11, admin_url=postgres_admin_url)
    assert figures["violations"] == 0, figures["examples"]
    assert figures["agent processes"] >= 4 and figures["compactor processes"] >= 4
    assert figures["job rows committed"] > 0
    assert figures["acked"] > 0 and figures["overlapping"] == figures["lost"] == 0

def test_offsets_acked_twice_and_overlapping_segments_are_counted(tmp_path: Path) -> None:
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 1)
    with Agent(open_store(f"file://{tmp_path}/store"), md,
               AgentConfig(linger_ms=600_000)) as agent:
        agent.produce("t", 0, None, b"a:1")
    tally = Tally(concurrency.KINDS)
    concurrency._check_overlaps(tally, md, {("t", 0): [(0, None, b"a:1"), (0, None, b"b:1")]})
    assert tally.counts["overlapping"] == 1
    md.close()
