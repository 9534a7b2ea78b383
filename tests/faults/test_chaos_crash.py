"""The crash suite, bounded: a trial per named kill point (the process must die there and
leave every promise kept), a few random-moment trials, the kill points themselves (in this
process and in a real `silt` process through SILT_KILLPOINT), and the checks' own teeth."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agent import Agent, AgentConfig
from faults import InjectedCrash, killpoints
from faults.check import Tally, check_log, check_objects, read_acks, read_logs
from faults.suites import crash
from metadata import MetadataStore
from objectstore import open_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("step", crash.STEPS)
def test_killed_at_each_named_step_keeps_every_promise(tmp_path: Path, step: str) -> None:
    tally, errors = Tally(crash.KINDS), list[str]()
    kill = crash.Plan(crash.ROLE_OF_STEP[step.split(".")[0]], f"{step}@1")
    outcome = crash.one(tmp_path, kill, random.Random(1), tally, errors, {})
    assert outcome == "step", f"{step} was never reached"
    assert errors == []
    assert tally.violations() == 0, tally.examples
    assert tally.acked >= 24 and tally.read > 0


def test_random_kills_keep_every_promise() -> None:
    figures = crash.run(trials=4, seed=3)
    assert figures["trials"] == 4
    assert figures["violations"] == 0, figures["examples"]
    assert figures["lost"] == figures["orphans"] == figures["duplicated"] == 0


def test_kill_point_fires_on_its_nth_time_and_can_be_taken_out(tmp_path: Path) -> None:
    def crash_here() -> None:
        raise InjectedCrash("killpoint")

    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    disarm = killpoints.arm("produce.registered@2", on_kill=crash_here)
    try:
        md.register_pending_file("data/a.silt", level=0, holds_compacted=False)
        with pytest.raises(InjectedCrash):  # after the call: the row is there
            md.register_pending_file("data/b.silt", level=0, holds_compacted=False)
        md.register_pending_file("data/c.silt", level=0, holds_compacted=False)  # once only
    finally:
        disarm()
    assert sorted(f.object_key for f in md.audit_snapshot().files) == [
        "data/a.silt", "data/b.silt", "data/c.silt"]
    md.close()


def test_unknown_kill_points_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown kill point 'produce\.nowhere'"):
        killpoints.parse("produce.nowhere")
    with pytest.raises(ValueError, match="N must be >= 1"):
        killpoints.parse("gc.done@0")
    assert killpoints.parse("gc.done@3") == ("gc.done", 3)


def test_silt_produce_dies_at_its_kill_point_after_the_commit(tmp_path: Path) -> None:
    env = {**os.environ, "SILT_STORE": f"file://{tmp_path}/objects",
           "SILT_METADATA": f"sqlite:///{tmp_path}/md.db", "PYTHONPATH": str(ROOT)}
    silt = [sys.executable, "-m", "faults.killpoints", "silt"]
    subprocess.run([*silt, "topics", "create", "t", "--partitions", "1"], env=env, check=True,
                   capture_output=True)
    rows = "".join(json.dumps({"partition": 0, "value": f"v{i}"}) + "\n" for i in range(5))
    done = subprocess.run([*silt, "produce", "t"], env={**env, "SILT_KILLPOINT":
                          "produce.committed"}, input=rows, text=True, capture_output=True)
    assert done.returncode == -signal.SIGKILL
    assert done.stdout == ""  # no ack printed: the process died before answering
    md = MetadataStore.open(env["SILT_METADATA"])
    read = read_logs(open_store(env["SILT_STORE"]), md, [("t", 0)])[("t", 0)]
    assert [r.value for r in read] == [b"v%d" % i for i in range(5)]  # committed, unacked
    md.close()


def test_checks_count_lost_moved_and_duplicated_records_and_orphans(tmp_path: Path) -> None:
    md = MetadataStore.open(f"sqlite:///{tmp_path}/md.db", create=True)
    md.create_topic("t", 1)
    store = open_store(f"file://{tmp_path}/store")
    with Agent(store, md, AgentConfig(linger_ms=600_000)) as agent:
        for v in (b"x:1", b"x:2", b"x:2"):
            agent.produce("t", 0, None, v)
    (tmp_path / "acks").write_text("t 0 0 - x:1\nt 0 5 - x:2\nt 0 3 - x:9\n")
    acked = read_acks(tmp_path / "acks")[("t", 0)]
    tally = Tally()
    check_log(tally, ("t", 0), read_logs(store, md, [("t", 0)])[("t", 0)], acked, ("x:",),
              compacted=False)
    assert (tally.counts["lost"], tally.counts["out_of_order"],
            tally.counts["duplicated"]) == (1, 1, 1)
    store.put("data/stray.silt", b"nobody's")
    (live,) = [f.object_key for f in md.audit_snapshot().files]
    store.delete_many([live])
    check_objects(tally, store, md)
    assert (tally.counts["orphans"], tally.counts["missing"]) == (1, 1)
    assert tally.violations() == 5 and len(tally.examples) == 5
    md.close()
