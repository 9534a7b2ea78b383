"""Kafka's partition admin APIs answered as a leaderless cluster truthfully can, through a
real `silt agent` with kafka-python's admin client: ElectLeaders (nothing to elect),
Alter/ListPartitionReassignments (nothing to move), DescribeTopicPartitions (KIP-966,
paginated)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka import errors as kerrors
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta

from agent.protocol.apis import ELECT_LEADERS

from .server import AgentProcess, RawClient
from .test_groups_raw import build


@pytest.fixture
def admin(agent_proc: AgentProcess) -> Iterator[KafkaAdminClient]:
    md = agent_proc.metadata()
    md.create_topic("a", 3)
    md.create_topic("b", 2)
    md.create_topic("c", 1)
    md.close()
    client = KafkaAdminClient(bootstrap_servers=agent_proc.bootstrap)
    yield client
    client.close()


def _results(response: Any) -> dict[tuple[str, int], tuple[int, str | None]]:
    return {(t.topic, p.partition_id): (p.error_code, p.error_message)
            for t in response.replica_election_results for p in t.partition_result}


def test_elect_leaders_has_nothing_to_elect(admin: KafkaAdminClient,
                                            agent_proc: AgentProcess) -> None:
    """Each named partition: ELECTION_NOT_NEEDED (preferred and unclean alike); unknown
    ones UNKNOWN_TOPIC_OR_PARTITION with Kafka's words; every partition (null): each topic
    listed without partitions, as Kafka leaves out those not needing an election; an unknown
    election type INVALID_REQUEST."""
    not_needed = kerrors.ElectionNotNeededError.errno
    unknown = kerrors.UnknownTopicOrPartitionError.errno
    for election in (0, 1):
        response = admin.elect_leaders(election, {"a": [0, 2], "b": [5], "zz": [0]},
                                       raise_errors=False)
        assert response.error_code == 0
        assert _results(response) == {
            ("a", 0): (not_needed, None), ("a", 2): (not_needed, None),
            ("b", 5): (unknown, "No such partition as b-5"),
            ("zz", 0): (unknown, "No such topic as zz")}
    client = RawClient(agent_proc.port)  # kafka-python names every partition itself
    try:
        everything = client.call(ELECT_LEADERS, 2, build(
            ELECT_LEADERS, 2, election_type=i8(0), topic_partitions=None,
            timeout=i32Timedelta.parse(timedelta(seconds=30))))
        assert everything.error_code == ErrorCode.none
        assert [(t.topic, t.partition_result) for t in everything.replica_election_results
                ] == [("a", ()), ("b", ()), ("c", ())]
        bad = client.call(ELECT_LEADERS, 2, build(
            ELECT_LEADERS, 2, election_type=i8(7), topic_partitions=(build(
                ELECT_LEADERS, 2, "TopicPartitions", topic="a", partitions=(i32(0),)),),
            timeout=i32Timedelta.parse(timedelta(seconds=30))))
        assert bad.error_code == ErrorCode.invalid_request
        [[result]] = [t.partition_result for t in bad.replica_election_results]
        assert (result.error_code, result.error_message) == (
            ErrorCode.invalid_request, "Unknown election type 7")
    finally:
        client.close()


def test_reassignments_have_nothing_to_move(admin: KafkaAdminClient,
                                            agent_proc: AgentProcess) -> None:
    """A reassignment naming live agents completes at once (nothing to copy); one naming
    an unknown broker or one twice is INVALID_REPLICA_ASSIGNMENT; a cancellation is
    NO_REASSIGNMENT_IN_PROGRESS; none is ever listed as ongoing."""
    [me] = [b.node_id for b in admin._manager.cluster.brokers()]
    answers = admin.alter_partition_reassignments({
        TopicPartition("a", 0): [me], TopicPartition("a", 1): [me, 999],
        TopicPartition("a", 2): [me, me], TopicPartition("b", 0): None,
        TopicPartition("b", 9): [me], TopicPartition("nope", 0): [me]})
    assert answers == {
        TopicPartition("a", 0): None,
        TopicPartition("a", 1): kerrors.InvalidReplicationAssignmentError,
        TopicPartition("a", 2): kerrors.InvalidReplicationAssignmentError,
        TopicPartition("b", 0): kerrors.NoReassignmentInProgressError,
        TopicPartition("b", 9): kerrors.UnknownTopicOrPartitionError,
        TopicPartition("nope", 0): kerrors.UnknownTopicOrPartitionError}
    assert admin.list_partition_reassignments() == {}
    assert admin.list_partition_reassignments({"a": [0, 1]}) == {}


def test_describe_topic_partitions_pages_with_a_cursor(admin: KafkaAdminClient) -> None:
    """Every topic in name order, at most response_partition_limit partitions a page,
    next_cursor where to go on (a topic's remaining partitions, or the next topic when a
    page ends exactly at one's end), null at the end; named topics too, unknown ones
    UNKNOWN_TOPIC_OR_PARTITION and illegal names INVALID_TOPIC_EXCEPTION."""
    pages, cursor = [], None
    while True:
        page = admin.describe_topic_partitions([], response_partition_limit=2, cursor=cursor)
        pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]])
                      for t in page["topics"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [[("a", [0, 1])], [("a", [2]), ("b", [0])], [("b", [1]), ("c", [0])]]
    page = admin.describe_topic_partitions(["c", "a", "missing", "bad name"],
                                           response_partition_limit=3)
    assert [t["name"] for t in page["topics"]] == ["a"]  # the page full at a's end
    assert page["next_cursor"] == {"topic_name": "bad name", "partition_index": 0}
    page = admin.describe_topic_partitions(["c", "a", "missing", "bad name"])
    got = [(t["name"], t["error_code"], len(t["partitions"])) for t in page["topics"]]
    assert got == [("a", 0, 3), ("bad name", kerrors.InvalidTopicError.errno, 0),
                   ("c", 0, 1), ("missing", kerrors.UnknownTopicOrPartitionError.errno, 0)]
    assert page["next_cursor"] is None
    [a] = [t for t in page["topics"] if t["name"] == "a"]
    part = a["partitions"][0]
    assert part["leader_id"] in part["replica_nodes"] and part["isr_nodes"] == part[
        "replica_nodes"] and part["leader_epoch"] == -1
