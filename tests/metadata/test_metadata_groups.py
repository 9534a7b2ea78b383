"""Consumer groups in the metadata store (metadata/groups.py), on both backends: coordinator
leases and their fencing, stored groups, committed offsets, resets, deletion, expiry."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from clock import ManualClock
from metadata import GroupLease, GroupMember, GroupRecord, MetadataStore, OffsetCommit
from metadata import schema as s
from metadata.errors import (
    GroupCoordinatedElsewhereError,
    GroupLeaseLostError,
    GroupNotEmptyError,
    UnknownGroupError,
    UnknownPartitionError,
    UnknownTopicError,
)
from metadata.models import GROUP_EMPTY, GROUP_STABLE
from tests.metadata.metadata_helpers import chunk, commit

MEMBER = GroupMember(member_id="m-1", group_instance_id="static-1", client_id="c1",
                     client_host="/10.0.0.1", rebalance_timeout_ms=30_000,
                     session_timeout_ms=10_000, metadata=b"\x00\x01sub\xff",
                     assignment=b"\x00\x03\x00\x00assigned\x80")


def _record(store: MetadataStore, group: str, state: str = GROUP_STABLE,
            members: tuple[GroupMember, ...] = (MEMBER,)) -> GroupRecord:
    return GroupRecord(group_id=group, protocol_type="consumer", protocol_name="range",
                       generation=3, leader=members[0].member_id if members else None,
                       state=state, members=members, state_at_ms=store.clock.now_ms())


def _session_lapses(store: MetadataStore, clock: ManualClock, *still_live: str) -> None:
    """Move past broker.session.timeout.ms; the agents in `still_live` heartbeat after."""
    clock.advance(store.config.broker_session_timeout_ms + 1)
    for agent_id in still_live:
        store.heartbeat_agent(agent_id)


def _retention_passes(store: MetadataStore, clock: ManualClock) -> None:
    clock.advance(store.config.offsets_retention_minutes * 60_000 + 1)


@pytest.fixture
def agents(store: MetadataStore) -> MetadataStore:
    """Two live agents, a1 and a2, and a topic t with two partitions (offsets 0..5)."""
    store.register_agent("a1", "h1", 9092)
    store.register_agent("a2", "h2", 9092)
    store.create_topic("t", 2)
    commit(store, "k0", [chunk("t", 0, span=5), chunk("t", 1, span=5)])
    return store


def _offsets(store: MetadataStore, group: str) -> dict[tuple[str, int], int]:
    return {(o.topic, o.partition): o.offset for o in store.fetch_offsets(group)}


# ------------------------------------------------------------------ leases


def test_acquire_then_elsewhere_while_the_holder_is_live(agents: MetadataStore) -> None:
    store = agents
    assert store.group_coordinator("g") is None
    lease = store.acquire_group("g", "a1")
    assert lease == GroupLease("g", "a1", 1)
    holder = store.group_coordinator("g")
    assert holder is not None and holder.agent_id == "a1" and holder.host == "h1"
    with pytest.raises(GroupCoordinatedElsewhereError) as err:
        store.acquire_group("g", "a2")
    assert err.value.holder == "a1"
    assert store.held_groups("a1") == {"g": 1}
    assert store.held_groups("a2") == {}
    # The holder acquiring again (a restarted incarnation) fences its earlier self.
    assert store.acquire_group("g", "a1").epoch == 2
    with pytest.raises(GroupLeaseLostError):
        store.store_group(lease, _record(store, "g"))


def test_takeover_after_the_holder_session_lapses(agents: MetadataStore,
                                                  clock: ManualClock) -> None:
    store = agents
    old = store.acquire_group("g", "a1")
    _session_lapses(store, clock, "a2")
    assert store.group_coordinator("g") is None  # the holder is no longer live
    new = store.acquire_group("g", "a2")
    assert new == GroupLease("g", "a2", 2)
    holder = store.group_coordinator("g")
    assert holder is not None and holder.agent_id == "a2"
    assert store.held_groups("a1") == {}
    assert store.held_groups("a2") == {"g": 2}
    # a1 comes back: a2 is live and holds the group.
    store.heartbeat_agent("a1")
    with pytest.raises(GroupCoordinatedElsewhereError):
        store.acquire_group("g", "a1")
    with pytest.raises(GroupLeaseLostError):
        store.commit_offsets("g", [OffsetCommit("t", 0, 1)], lease=old)


def test_takeover_after_deregister(agents: MetadataStore) -> None:
    store = agents
    store.acquire_group("g", "a1")
    store.deregister_agent("a1")
    assert store.group_coordinator("g") is None
    assert store.acquire_group("g", "a2") == GroupLease("g", "a2", 2)


def test_fenced_writes_raise_and_write_nothing(agents: MetadataStore, clock: ManualClock) -> None:
    store = agents
    old = store.acquire_group("g", "a1")
    store.store_group(old, _record(store, "g"))
    assert store.commit_offsets("g", [OffsetCommit("t", 0, 2)], lease=old) == set()
    _session_lapses(store, clock, "a2")
    new = store.acquire_group("g", "a2")
    before = store.load_group("g")

    changed = _record(store, "g", state=GROUP_EMPTY, members=())
    with pytest.raises(GroupLeaseLostError, match="a2"):
        store.store_group(old, changed)
    with pytest.raises(GroupLeaseLostError):
        store.commit_offsets("g", [OffsetCommit("t", 0, 4), OffsetCommit("t", 1, 4)],
                             lease=old)
    with pytest.raises(GroupLeaseLostError):
        store.delete_offsets("g", [("t", 0)], lease=old)
    with pytest.raises(GroupLeaseLostError):
        store.delete_group("g", lease=old)
    assert store.load_group("g") == before
    assert _offsets(store, "g") == {("t", 0): 2}

    # The new holder's writes go through.
    store.store_group(new, changed)
    assert store.commit_offsets("g", [OffsetCommit("t", 1, 4)], lease=new) == set()
    assert store.load_group("g") == changed
    assert _offsets(store, "g") == {("t", 0): 2, ("t", 1): 4}


def test_fence_refuses_a_lease_of_a_group_never_acquired(agents: MetadataStore) -> None:
    with pytest.raises(GroupLeaseLostError, match="nobody"):
        agents.commit_offsets("g", [OffsetCommit("t", 0, 1)], lease=GroupLease("g", "a1", 1))
    assert agents.fetch_offsets("g") == []


def test_held_existing_groups_pages_the_existing_groups_an_agent_holds(
        agents: MetadataStore) -> None:
    store = agents
    for group in ("g1", "g2", "g3", "leased-only"):
        store.acquire_group(group, "a1")
    store.store_group(GroupLease("g1", "a1", 1), _record(store, "g1"))
    store.commit_offsets("g2", [OffsetCommit("t", 0, 1)], lease=GroupLease("g2", "a1", 1))
    store.store_group(GroupLease("g3", "a1", 1), _record(store, "g3", GROUP_EMPTY, ()))
    store.store_group(store.acquire_group("other", "a2"), _record(store, "other"))
    assert store.held_existing_groups("a1", None, 10) == ["g1", "g2", "g3"]
    assert store.held_existing_groups("a1", None, 2) == ["g1", "g2"]
    assert store.held_existing_groups("a1", "g2", 2) == ["g3"]
    assert store.held_existing_groups("a1", "g3", 2) == []
    assert store.held_existing_groups("a2", None, 10) == ["other"]


def test_adopt_groups_takes_only_its_own_existing_leases_and_fences_the_old_ones(
        agents: MetadataStore) -> None:
    store = agents
    old = store.acquire_group("g1", "a1")
    record = _record(store, "g1")
    store.store_group(old, record)
    store.commit_offsets("g2", [OffsetCommit("t", 0, 1)], lease=store.acquire_group("g2", "a1"))
    store.acquire_group("leased-only", "a1")
    store.store_group(store.acquire_group("other", "a2"), _record(store, "other"))
    adopted = store.adopt_groups("a1", ["other", "g2", "leased-only", "g1", "absent"])
    assert adopted == [(GroupLease("g1", "a1", 2), record), (GroupLease("g2", "a1", 2), None)]
    assert store.held_groups("a1") == {"g1": 2, "g2": 2, "leased-only": 1}
    assert store.held_groups("a2") == {"other": 1}  # a live other agent's: left alone
    with pytest.raises(GroupLeaseLostError):  # the previous process is fenced
        store.store_group(old, _record(store, "g1", GROUP_EMPTY, ()))
    assert store.adopt_groups("a1", []) == []


def _race_to_acquire(url: str, group: str, agent_ids: list[str]
                     ) -> tuple[list[GroupLease], list[str]]:
    """Every agent tries to acquire `group` at once, each on its own handle: the leases
    won and the holders named to the losers."""
    barrier = threading.Barrier(len(agent_ids))
    won: list[GroupLease] = []
    lost: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def acquire(agent_id: str) -> None:
        store = MetadataStore.open(url, create=True)
        try:
            barrier.wait()
            lease = store.acquire_group(group, agent_id)
            with lock:
                won.append(lease)
        except GroupCoordinatedElsewhereError as exc:
            with lock:
                lost.append(exc.holder)
        except BaseException as exc:
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=acquire, args=(a,)) for a in agent_ids]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    return won, lost


def test_concurrent_acquire_has_exactly_one_winner(postgres_url: str) -> None:
    setup = MetadataStore.open(postgres_url, create=True)
    agent_ids = [f"a{i}" for i in range(6)]
    for i, agent_id in enumerate(agent_ids):
        setup.register_agent(agent_id, "h", 9092 + i)
    try:
        for round_ in range(5):
            group = f"g{round_}"
            won, lost = _race_to_acquire(postgres_url, group, agent_ids)
            assert len(won) == 1, won
            assert won[0].epoch == 1
            assert lost == [won[0].agent_id] * (len(agent_ids) - 1)
            holder = setup.group_coordinator(group)
            assert holder is not None and holder.agent_id == won[0].agent_id
    finally:
        setup.close()


# ------------------------------------------------------------------ stored groups


def test_store_and_load_round_trip(agents: MetadataStore) -> None:
    store = agents
    assert store.load_group("g") is None
    lease = store.acquire_group("g", "a1")
    other = GroupMember(member_id="m-2", group_instance_id=None, client_id="c2",
                        client_host="/10.0.0.2", rebalance_timeout_ms=5000,
                        session_timeout_ms=6000, metadata=b"", assignment=bytes(range(256)))
    record = _record(store, "g", members=(MEMBER, other))
    store.store_group(lease, record)
    loaded = store.load_group("g")
    assert loaded == record
    assert loaded is not None and loaded.members[1].assignment == bytes(range(256))
    emptied = _record(store, "g", state=GROUP_EMPTY, members=())
    store.store_group(lease, emptied)
    assert store.load_group("g") == emptied
    assert [g.group_id for g in store.list_groups()] == ["g"]


def test_list_groups_includes_offset_only_groups(agents: MetadataStore) -> None:
    store = agents
    lease = store.acquire_group("b", "a1")
    store.store_group(lease, _record(store, "b"))
    store.commit_offsets("a-simple", [OffsetCommit("t", 0, 1)])
    groups = store.list_groups()
    assert [g.group_id for g in groups] == ["a-simple", "b"]
    assert groups[0].state == GROUP_EMPTY and groups[0].protocol_type is None
    assert groups[0].members == ()
    assert groups[1].state == GROUP_STABLE and groups[1].protocol_type == "consumer"


# ------------------------------------------------------------------ offsets


def test_commit_offsets_returns_unknown_partitions_and_writes_the_rest(
        agents: MetadataStore) -> None:
    store = agents
    lease = store.acquire_group("g", "a1")
    unknown = store.commit_offsets("g", [
        OffsetCommit("t", 0, 3, leader_epoch=7, metadata="meta"),
        OffsetCommit("t", 5, 1),  # no such partition
        OffsetCommit("nope", 0, 1),  # no such topic
    ], lease=lease)
    assert unknown == {("t", 5), ("nope", 0)}
    [got] = store.fetch_offsets("g")
    assert (got.topic, got.partition, got.offset, got.leader_epoch, got.metadata) == \
        ("t", 0, 3, 7, "meta")
    assert got.committed_at_ms == store.clock.now_ms()
    # A later commit of the same partition replaces it (one row per partition).
    store.commit_offsets("g", [OffsetCommit("t", 0, 4, metadata=None)], lease=lease)
    [got] = store.fetch_offsets("g")
    assert (got.offset, got.leader_epoch, got.metadata) == (4, -1, None)


def test_fetch_offsets_filters_by_topic(agents: MetadataStore) -> None:
    store = agents
    store.create_topic("u", 1)
    store.commit_offsets("g", [OffsetCommit("u", 0, 9), OffsetCommit("t", 1, 2),
                               OffsetCommit("t", 0, 1)])
    store.commit_offsets("other", [OffsetCommit("t", 0, 5)])
    assert [(o.topic, o.partition) for o in store.fetch_offsets("g")] == \
        [("t", 0), ("t", 1), ("u", 0)]
    assert [(o.topic, o.partition, o.offset) for o in store.fetch_offsets("g", ["u"])] == \
        [("u", 0, 9)]
    assert store.fetch_offsets("g", ["missing"]) == []
    assert store.fetch_offsets("g", []) == []
    assert store.fetch_offsets("nobody") == []


def test_delete_offsets(agents: MetadataStore) -> None:
    store = agents
    store.commit_offsets("g", [OffsetCommit("t", 0, 1), OffsetCommit("t", 1, 2)])
    assert store.delete_offsets("g", [("t", 0), ("t", 9)]) == 1
    assert _offsets(store, "g") == {("t", 1): 2}
    assert store.delete_offsets("g", []) == 0


def test_group_lag(agents: MetadataStore) -> None:
    store = agents
    store.create_topic("u", 1)
    store.commit_offsets("g", [OffsetCommit("t", 0, 2), OffsetCommit("u", 0, 0)])
    store.commit_offsets("g", [OffsetCommit("gone", 0, 7)])  # unknown: not stored
    lag = store.group_lag("g", also=[("t", 1), ("t", 0), ("u", 3)])
    assert [(x.topic, x.partition, x.committed_offset, x.log_end_offset, x.lag)
            for x in lag] == [("t", 0, 2, 5, 3), ("t", 1, None, 5, None),
                              ("u", 0, 0, 0, 0), ("u", 3, None, None, None)]
    assert store.group_lag("nobody") == []


def test_deleting_a_topic_deletes_its_committed_offsets(agents: MetadataStore) -> None:
    """As Kafka's handleDeletedPartitions: a topic created again under the name starts
    its groups from their reset policy, not from the old topic's offsets."""
    store = agents
    store.create_topic("u", 1)
    store.commit_offsets("g", [OffsetCommit("t", 1, 4), OffsetCommit("u", 0, 0)])
    store.delete_topic("t")
    assert [(o.topic, o.partition) for o in store.fetch_offsets("g")] == [("u", 0)]
    assert [(x.topic, x.lag) for x in store.group_lag("g")] == [("u", 0)]


# ------------------------------------------------------------------ reset and delete


def test_reset_offsets_refused_while_the_group_has_members(agents: MetadataStore) -> None:
    store = agents
    lease = store.acquire_group("g", "a1")
    store.store_group(lease, _record(store, "g"))
    store.commit_offsets("g", [OffsetCommit("t", 0, 3)], lease=lease)
    with pytest.raises(GroupNotEmptyError, match="Stable"):
        store.reset_offsets("g", [OffsetCommit("t", 0, 0)])
    assert _offsets(store, "g") == {("t", 0): 3}
    store.store_group(lease, _record(store, "g", state=GROUP_EMPTY, members=()))
    store.reset_offsets("g", [OffsetCommit("t", 0, 0), OffsetCommit("t", 1, 5)])
    assert _offsets(store, "g") == {("t", 0): 0, ("t", 1): 5}
    # The stored group is left as its coordinator stored it.
    loaded = store.load_group("g")
    assert loaded is not None and loaded.protocol_type == "consumer"


def test_reset_offsets_of_a_group_whose_coordinator_died(agents: MetadataStore,
                                                        clock: ManualClock) -> None:
    """A group stored Stable by an agent that died: refused while its members' sessions
    may still run (another agent could take it over with them), then, as Kafka would have
    expired them, reset, and stored Empty (a takeover makes the members rejoin)."""
    store = agents
    lease = store.acquire_group("g", "a1")
    store.store_group(lease, _record(store, "g"))
    _session_lapses(store, clock, "a2")  # a1 is dead; the member's session is not over
    assert store.group_coordinator("g") is None
    with pytest.raises(GroupNotEmptyError, match="Stable"):
        store.reset_offsets("g", [OffsetCommit("t", 0, 1)])
    clock.advance(MEMBER.session_timeout_ms)
    store.reset_offsets("g", [OffsetCommit("t", 0, 1)])
    assert _offsets(store, "g") == {("t", 0): 1}
    loaded = store.load_group("g")
    assert loaded is not None and loaded.state == GROUP_EMPTY and loaded.members == ()


def test_reset_offsets_of_an_absent_group(agents: MetadataStore) -> None:
    store = agents
    store.reset_offsets("new", [OffsetCommit("t", 1, 2)])
    assert _offsets(store, "new") == {("t", 1): 2}
    loaded = store.load_group("new")
    assert loaded is not None and loaded.state == GROUP_EMPTY and loaded.members == ()


def test_reset_offsets_of_unknown_partitions_writes_nothing(agents: MetadataStore) -> None:
    store = agents
    with pytest.raises(UnknownPartitionError, match="t-7"):
        store.reset_offsets("g", [OffsetCommit("t", 0, 1), OffsetCommit("t", 7, 1)])
    with pytest.raises(UnknownTopicError, match="nope"):
        store.reset_offsets("g", [OffsetCommit("t", 0, 1), OffsetCommit("nope", 0, 1)])
    assert store.fetch_offsets("g") == []
    assert store.load_group("g") is None


def test_delete_group(agents: MetadataStore) -> None:
    store = agents
    lease = store.acquire_group("g", "a1")
    store.store_group(lease, _record(store, "g"))
    store.commit_offsets("g", [OffsetCommit("t", 0, 3)], lease=lease)
    with pytest.raises(GroupNotEmptyError):
        store.delete_group("g")
    assert store.load_group("g") is not None and _offsets(store, "g") == {("t", 0): 3}
    store.store_group(lease, _record(store, "g", state=GROUP_EMPTY, members=()))
    store.delete_group("g")
    assert store.load_group("g") is None and store.fetch_offsets("g") == []
    assert store.list_groups() == []
    assert store.group_coordinator("g") is None  # the lease went with it
    with pytest.raises(UnknownGroupError):
        store.delete_group("g")
    # An offsets-only group, deleted by its coordinator (which keeps its lease).
    store.commit_offsets("simple", [OffsetCommit("t", 1, 1)])
    lease = store.acquire_group("simple", "a2")
    store.delete_group("simple", lease=lease)
    assert store.list_groups() == []
    assert store.held_groups("a2") == {"simple": 1}


# ------------------------------------------------------------------ expiry


def test_expire_offsets_of_an_empty_group_after_retention(agents: MetadataStore,
                                                          clock: ManualClock) -> None:
    store = agents
    lease = store.acquire_group("g", "a1")
    store.commit_offsets("g", [OffsetCommit("t", 0, 1), OffsetCommit("t", 1, 1)], lease=lease)
    store.store_group(lease, _record(store, "g", state=GROUP_EMPTY, members=()))
    clock.advance(store.config.offsets_retention_minutes * 60_000 - 1)
    store.heartbeat_agent("a1")
    assert store.expire_offsets() == 0
    clock.advance(2)
    store.heartbeat_agent("a1")
    assert store.expire_offsets() == 2
    assert store.fetch_offsets("g") == [] and store.load_group("g") is None


def test_expire_simple_consumer_offsets_per_commit_time(agents: MetadataStore,
                                                        clock: ManualClock) -> None:
    store = agents
    store.commit_offsets("simple", [OffsetCommit("t", 0, 1)])
    clock.advance(60_000)
    store.commit_offsets("simple", [OffsetCommit("t", 1, 1)])
    clock.advance(store.config.offsets_retention_minutes * 60_000 - 30_000)
    assert store.expire_offsets() == 1
    assert _offsets(store, "simple") == {("t", 1): 1}
    clock.advance(30_000)
    assert store.expire_offsets() == 1
    assert store.list_groups() == []


def test_expire_offsets_of_a_group_with_no_live_coordinator(agents: MetadataStore,
                                                            clock: ManualClock) -> None:
    store = agents
    lease = store.acquire_group("g", "a1")
    store.store_group(lease, _record(store, "g"))  # Stable, then its coordinator dies
    store.commit_offsets("g", [OffsetCommit("t", 0, 1)], lease=lease)
    clock.advance(10_000)
    store.heartbeat_agent("a1")  # its last sign of life
    clock.advance(store.config.offsets_retention_minutes * 60_000 - 5_000)
    assert store.expire_offsets() == 0  # retention counts from the holder's last heartbeat
    clock.advance(5_001)
    assert store.expire_offsets() == 1
    assert store.load_group("g") is None


def test_expire_keeps_an_active_group(agents: MetadataStore, clock: ManualClock) -> None:
    store = agents
    lease = store.acquire_group("g", "a1")
    store.store_group(lease, _record(store, "g"))
    store.commit_offsets("g", [OffsetCommit("t", 0, 1)], lease=lease)
    _retention_passes(store, clock)
    store.heartbeat_agent("a1")  # the coordinator is live: the group is Stable
    assert store.expire_offsets() == 0
    assert _offsets(store, "g") == {("t", 0): 1}
    assert store.load_group("g") is not None


def test_expire_keeps_offsets_reset_or_committed_since_the_group_emptied(
        agents: MetadataStore, clock: ManualClock) -> None:
    store = agents
    lease = store.acquire_group("g", "a1")
    store.commit_offsets("g", [OffsetCommit("t", 0, 1)], lease=lease)
    store.store_group(lease, _record(store, "g", state=GROUP_EMPTY, members=()))
    _retention_passes(store, clock)
    store.reset_offsets("g", [OffsetCommit("t", 0, 0)])  # long empty: an operator resets
    assert store.expire_offsets() == 0
    assert _offsets(store, "g") == {("t", 0): 0}
    _retention_passes(store, clock)
    assert store.expire_offsets() == 1
    # A simple consumer starting from a reset keeps committing: not expired meanwhile.
    store.reset_offsets("s", [OffsetCommit("t", 1, 0)])
    for _ in range(3):
        clock.advance(store.config.offsets_retention_minutes * 60_000 // 2)
        store.commit_offsets("s", [OffsetCommit("t", 1, 2)])
        assert store.expire_offsets() == 0
    assert _offsets(store, "s") == {("t", 1): 2}


def test_expire_leaves_other_groups_and_tables(agents: MetadataStore,
                                               clock: ManualClock) -> None:
    store = agents
    store.commit_offsets("old", [OffsetCommit("t", 0, 1)])
    _retention_passes(store, clock)
    store.commit_offsets("new", [OffsetCommit("t", 0, 1)])
    assert store.expire_offsets() == 1
    assert [g.group_id for g in store.list_groups()] == ["new"]
    with store.read() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(s.group_offsets)
                            ).scalar_one() == 1
