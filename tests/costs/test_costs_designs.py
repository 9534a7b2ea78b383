"""The naive designs `silt costs` measures, on the product's hooks: a seek-based input
reader (one ranged GET per partition region and pass) and one object per partition."""

from __future__ import annotations

from pathlib import Path

from agent import Agent, AgentConfig
from compactor import Compactor
from costs import PerPartitionObjectsAgent, SeekInputs
from metadata import MetadataStore
from objectstore import ObjectStore, open_store

PARTITIONS = 5
FILES = 2


def _two_files(tmp_path: Path, name: str) -> tuple[ObjectStore, MetadataStore]:
    md = MetadataStore.open(f"sqlite:///{tmp_path}/{name}.db", create=True)
    md.create_topic("s", PARTITIONS, {"cleanup.policy": "compact"})
    store = open_store(f"memory://{name}")
    with Agent(store, md, AgentConfig(linger_ms=3_600_000)) as agent:
        for f in range(FILES):
            for p in range(PARTITIONS):
                agent.produce("s", p, b"k", b"v%d" % f)
            agent.flush()
    return store, md


def test_seek_inputs_get_each_partition_region_and_merge_the_same(tmp_path: Path) -> None:
    store, md = _two_files(tmp_path, "streams")
    (streams,) = Compactor(store, md).run_once(everything=True)
    md.close()
    store, md = _two_files(tmp_path, "seeks")
    (seeks,) = Compactor(store, md, open_input=SeekInputs(md)).run_once(everything=True)
    md.close()
    assert streams.outcome == seeks.outcome == "committed"
    assert streams.stats == seeks.stats and streams.output_bytes == seeks.output_bytes
    assert streams.requests["GET"] == 2 * FILES
    # Per file: one GET per META entry and one for the META trailer, one per DATA chunk.
    assert seeks.requests["GET"] == FILES * (2 * PARTITIONS + 1)


def test_per_partition_objects_agent_writes_one_object_per_partition(tmp_path: Path) -> None:
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 3)
    store = open_store("memory://per-partition")
    with PerPartitionObjectsAgent(store, md, AgentConfig(linger_ms=3_600_000)) as agent:
        futs = [agent.produce("t", i % 3, None, b"v") for i in range(6)]
        agent.flush()
        assert [(r.partitions, r.records) for r in agent.reports] == [(1, 2)] * 3
    assert [f.result() for f in futs] == [0, 0, 0, 1, 1, 1]
    assert len({f.object_key for f in md.snapshot().files}) == 3
    md.close()
