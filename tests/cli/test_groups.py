"""`silt groups list|describe|reset-offsets|delete`, against the metadata store directly, on
both metadata backends."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from kio.schema.consumer_protocol_assignment.v3.data import (
    ConsumerProtocolAssignment,
    TopicPartition,
)
from kio.schema.types import TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32

from agent import Agent, AgentConfig
from cli.groups import assigned_partitions
from cli.main import cli
from metadata import GroupLease, GroupMember, GroupRecord, MetadataStore, OffsetCommit
from metadata.models import GROUP_EMPTY, GROUP_STABLE
from objectstore import open_store
from tests.metadata.metadata_helpers import chunk, commit

T0 = 1_700_000_000_000  # record timestamps of the --to-datetime test (2023-11-14T22:13:20Z)


def run(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def assignment(parts: dict[str, list[int]], version: int = 3) -> bytes:
    """A member's assignment as a Kafka consumer's assignor writes it."""
    buf = io.BytesIO()
    entity_writer(ConsumerProtocolAssignment)(buf, ConsumerProtocolAssignment(
        assigned_partitions=tuple(TopicPartition(topic=TopicName(t), partitions=tuple(map(i32, ps)))
                                  for t, ps in parts.items()), user_data=None))
    return version.to_bytes(2, "big") + buf.getvalue()


def member(member_id: str, assigned: bytes, instance: str | None = None) -> GroupMember:
    return GroupMember(member_id=member_id, group_instance_id=instance, client_id="app",
                       client_host=f"/10.0.0.{len(member_id)}", rebalance_timeout_ms=30_000,
                       session_timeout_ms=10_000, metadata=b"sub", assignment=assigned)


def stored(group: str, state: str, members: tuple[GroupMember, ...],
           protocol: tuple[str, str] = ("consumer", "range")) -> GroupRecord:
    return GroupRecord(group_id=group, protocol_type=protocol[0], protocol_name=protocol[1],
                       generation=4, leader=members[0].member_id if members else None,
                       state=state, members=members, state_at_ms=T0)


@pytest.fixture
def env(metadata_url: str, tmp_path: Path) -> dict[str, str]:
    return {"SILT_STORE": f"file://{tmp_path}/objects", "SILT_METADATA": metadata_url}


@pytest.fixture
def md(env: dict[str, str]) -> Iterator[MetadataStore]:
    """The store the CLI reads, with topic t (partitions 0 and 1, offsets 0..5 each) and
    agent a1 live."""
    store = MetadataStore.open(env["SILT_METADATA"], create=True)
    store.create_topic("t", 2)
    commit(store, "k0", [chunk("t", 0, span=5), chunk("t", 1, span=5)])
    store.register_agent("a1", "h1", 9092)
    yield store
    store.close()


def active_group(md: MetadataStore, group: str = "active") -> GroupLease:
    """A Stable consumer group coordinated by a1: m-1 has t-0 (committed 2), m-2 t-1."""
    lease = md.acquire_group(group, "a1")
    md.store_group(lease, stored(group, GROUP_STABLE, (
        member("m-1", assignment({"t": [0]}), instance="i-1"),
        member("m-2", assignment({"t": [1]}, version=0)))))
    assert md.commit_offsets(group, [OffsetCommit("t", 0, 2)], lease=lease) == set()
    return lease


def empty(md: MetadataStore, lease: GroupLease) -> None:
    md.store_group(lease, stored(lease.group_id, GROUP_EMPTY, ()))


def committed(md: MetadataStore, group: str) -> dict[int, int]:
    return {o.partition: o.offset for o in md.fetch_offsets(group)}


def test_assigned_partitions_decodes_the_consumer_protocol() -> None:
    data = assignment({"t": [2, 0], "u": [1]})
    assert assigned_partitions("consumer", data) == [("t", 0), ("t", 2), ("u", 1)]
    newer = (7).to_bytes(2, "big") + data[2:] + b"fields of a later version"
    assert assigned_partitions("consumer", newer) == [("t", 0), ("t", 2), ("u", 1)]
    assert assigned_partitions("consumer", b"") == []
    assert assigned_partitions("consumer", data[:9]) is None
    assert assigned_partitions("consumer", b"\xff\xff" + data[2:]) is None
    assert assigned_partitions("connect", data) is None


def test_list(env: dict[str, str], md: MetadataStore) -> None:
    assert run(["groups", "list", "--json"], env) == (0, "[]\n", "")
    active_group(md)
    md.commit_offsets("simple", [OffsetCommit("t", 1, 1)])
    code, out, err = run(["groups", "list", "--json"], env)
    assert code == 0, err
    assert json.loads(out) == [
        {"group_id": "active", "state": "Stable", "protocol_type": "consumer", "members": 2,
         "coordinator": "a1"},
        {"group_id": "simple", "state": "Empty", "protocol_type": None, "members": 0,
         "coordinator": None}]
    code, out, _ = run(["groups", "list"], env)
    assert out.splitlines() == [
        "active\tstate=Stable\tprotocol_type=consumer\tmembers=2\tcoordinator=a1",
        "simple\tstate=Empty\tprotocol_type=-\tmembers=0\tcoordinator=-"]
    md.deregister_agent("a1")
    assert json.loads(run(["groups", "list", "--json"], env)[1])[0]["coordinator"] is None


def test_describe(env: dict[str, str], md: MetadataStore) -> None:
    active_group(md)
    code, out, err = run(["groups", "describe", "active", "--json"], env)
    assert code == 0, err
    row = json.loads(out)
    assert {k: row[k] for k in ("group_id", "state", "protocol_type", "protocol",
                                "generation", "leader", "members", "coordinator")} == {
        "group_id": "active", "state": "Stable", "protocol_type": "consumer",
        "protocol": "range", "generation": 4, "leader": "m-1", "members": 2,
        "coordinator": "a1"}
    assert row["member_detail"][0] == {
        "member_id": "m-1", "group_instance_id": "i-1", "client_id": "app",
        "client_host": "/10.0.0.3", "assignment": [{"topic": "t", "partition": 0}],
        "assignment_bytes": len(assignment({"t": [0]}))}
    assert row["member_detail"][1]["assignment"] == [{"topic": "t", "partition": 1}]
    assert row["offsets"] == [
        {"topic": "t", "partition": 0, "committed_offset": 2, "log_end_offset": 5, "lag": 3,
         "member_id": "m-1"},
        {"topic": "t", "partition": 1, "committed_offset": None, "log_end_offset": 5,
         "lag": None, "member_id": "m-2"}]

    code, out, _ = run(["groups", "describe", "active"], env)
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["group", "active", "state=Stable", "protocol=consumer/range",
                        "generation=4", "members=2", "coordinator=a1"]
    assert ["m-1", "i-1", "app", "/10.0.0.3", "t-0"] in lines
    assert ["m-2", "-", "app", "/10.0.0.3", "t-1"] in lines
    assert ["t", "0", "2", "5", "3", "m-1"] in lines
    assert ["t", "1", "-", "5", "-", "m-2"] in lines


def test_describe_other_protocols_and_simple_groups(env: dict[str, str],
                                                    md: MetadataStore) -> None:
    lease = md.acquire_group("connect", "a1")
    md.store_group(lease, stored("connect", GROUP_STABLE, (member("w-1", b"\x01" * 9),),
                                 protocol=("connect", "sessioned")))
    row = json.loads(run(["groups", "describe", "connect", "--json"], env)[1])
    assert row["member_detail"][0]["assignment"] is None
    assert row["member_detail"][0]["assignment_bytes"] == 9 and row["offsets"] == []
    assert ["w-1", "-", "app", "/10.0.0.3", "9", "bytes"] in \
        [line.split() for line in run(["groups", "describe", "connect"], env)[1].splitlines()]

    md.commit_offsets("simple", [OffsetCommit("t", 1, 5)])
    row = json.loads(run(["groups", "describe", "simple", "--json"], env)[1])
    assert (row["state"], row["protocol_type"], row["members"], row["coordinator"]) == \
        ("Empty", None, 0, None)
    assert row["offsets"] == [{"topic": "t", "partition": 1, "committed_offset": 5,
                               "log_end_offset": 5, "lag": 0, "member_id": None}]


def test_describe_unknown_group(env: dict[str, str], md: MetadataStore) -> None:
    code, out, err = run(["groups", "describe", "nope"], env)
    assert code == 1 and out == ""
    assert err == "silt: group 'nope' does not exist\n"


def test_reset_offsets_dry_run_then_refused_while_active(env: dict[str, str],
                                                         md: MetadataStore) -> None:
    active_group(md)
    code, out, err = run(["groups", "reset-offsets", "active", "--topic", "t",
                          "--to-earliest"], env)
    assert code == 0, err
    assert [line.split() for line in out.splitlines()] == [
        ["topic", "partition", "current", "new"], ["t", "0", "2", "0"], ["t", "1", "-", "0"]]
    assert "dry run" in err
    assert committed(md, "active") == {0: 2}
    code, out, err = run(["groups", "reset-offsets", "active", "--topic", "t",
                          "--to-earliest", "--execute"], env)
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1 and "Stable" in err
    assert committed(md, "active") == {0: 2}


def test_reset_offsets_execute(env: dict[str, str], md: MetadataStore) -> None:
    lease = active_group(md)
    empty(md, lease)
    assert md.delete_records({("t", 1): 3})[("t", 1)] == 3  # t-1's log starts at 3

    def reset(*args: str) -> dict[int, int]:
        code, out, err = run(["groups", "reset-offsets", "active", "--topic", "t", *args,
                              "--execute", "--json"], env)
        assert code == 0, err
        plan = json.loads(out)
        assert plan["group_id"] == "active" and plan["executed"] is True
        got = {r["partition"]: r["new_offset"] for r in plan["partitions"]}
        assert committed(md, "active") | got == committed(md, "active")
        return got

    assert reset("--to-earliest") == {0: 0, 1: 3}
    assert reset("--to-latest") == {0: 5, 1: 5}
    assert reset("--to-offset", "4") == {0: 4, 1: 4}
    assert reset("--to-offset", "1") == {0: 1, 1: 3}  # clamped into [log start, end]
    assert reset("--to-offset", "99", "--partition", "1") == {1: 5}
    assert committed(md, "active") == {0: 1, 1: 5}
    code, out, err = run(["groups", "reset-offsets", "active", "--topic", "t", "--to-latest",
                          "--partition", "0", "--json"], env)
    assert json.loads(out)["executed"] is False
    assert json.loads(out)["partitions"] == [
        {"topic": "t", "partition": 0, "current_offset": 1, "new_offset": 5}]
    # An absent group's offsets can be set (it then exists, Empty).
    code, _, err = run(["groups", "reset-offsets", "fresh", "--topic", "t", "--to-latest",
                        "--execute"], env)
    assert code == 0 and "reset 2 partition(s) of group fresh" in err
    assert committed(md, "fresh") == {0: 5, 1: 5}


def test_reset_offsets_errors(env: dict[str, str], md: MetadataStore) -> None:
    base = ["groups", "reset-offsets", "g", "--topic", "t"]
    for args in ([], ["--to-earliest", "--to-latest"], ["--to-latest", "--to-offset", "1"]):
        code, _, err = run([*base, *args], env)
        assert code == 2 and "exactly one of" in err
    code, _, err = run([*base, "--to-datetime", "yesterday"], env)
    assert code == 2 and "ISO 8601" in err
    code, out, err = run([*base, "--to-latest", "--partition", "2", "--execute"], env)
    assert (code, out) == (1, "") and err.startswith("silt: ") and "partition 2" in err
    code, out, err = run(["groups", "reset-offsets", "g", "--topic", "nope", "--to-latest"], env)
    assert (code, out) == (1, "") and "nope" in err and len(err.splitlines()) == 1
    assert md.fetch_offsets("g") == [] and md.load_group("g") is None


def test_reset_offsets_to_datetime(env: dict[str, str], md: MetadataStore) -> None:
    md.create_topic("ts", 2)
    # ts-0: offsets 0..9 at T0 + 0, 1000, ..., 9000; ts-1: one record at T0.
    with Agent(open_store(env["SILT_STORE"]), md, AgentConfig(linger_ms=0)) as agent:
        futures = [agent.produce("ts", 0, b"k", b"v", timestamp=T0 + 1000 * i)
                   for i in range(10)]
        futures.append(agent.produce("ts", 1, b"k", b"v", timestamp=T0))
        assert [f.result() for f in futures] == [*range(10), 0]

    def plan(when: str) -> dict[int, int]:
        code, out, err = run(["groups", "reset-offsets", "g", "--topic", "ts",
                              "--to-datetime", when, "--json"], env)
        assert code == 0, err
        return {r["partition"]: r["new_offset"] for r in json.loads(out)["partitions"]}

    assert plan("2023-11-14T22:13:20Z") == {0: 0, 1: 0}
    assert plan("2023-11-14T22:13:23.500") == {0: 4, 1: 1}  # no zone: UTC; ts-1: its end
    assert plan("2023-11-14T23:13:27+01:00") == {0: 7, 1: 1}
    assert plan("2023-11-14T22:14:00+00:00") == {0: 10, 1: 1}  # later than every record
    assert plan("2020-01-01") == {0: 0, 1: 0}


def test_delete(env: dict[str, str], md: MetadataStore) -> None:
    lease = active_group(md)
    code, out, err = run(["groups", "delete", "active"], env)
    assert code == 1 and out == "" and len(err.splitlines()) == 1 and "Stable" in err
    assert committed(md, "active") == {0: 2}
    empty(md, lease)
    assert run(["groups", "delete", "active"], env) == (0, "deleted group active\n", "")
    assert md.load_group("active") is None and md.fetch_offsets("active") == []
    assert run(["groups", "list", "--json"], env)[1] == "[]\n"
    code, out, err = run(["groups", "delete", "active"], env)
    assert (code, out, err) == (1, "", "silt: group 'active' does not exist\n")
