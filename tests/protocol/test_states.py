"""The partition states cache (agent/protocol/states.py): exact by commit notifications."""

from __future__ import annotations

from agent.protocol.states import PartitionStates
from metadata import PartitionInfo

KEY = ("t", 0)


def _known(next_offset: int) -> tuple[int, PartitionInfo]:
    return 7, PartitionInfo("t", 0, 0, next_offset)


def test_kept_until_the_next_notification() -> None:
    states = PartitionStates()
    states.hearing = lambda: True
    states.put(states.generation(), {KEY: _known(5)})
    assert states.get([KEY, ("t", 1)]) == {KEY: _known(5)}
    states.changed()
    assert states.get([KEY]) == {}


def test_a_read_begun_before_a_notification_is_not_kept() -> None:
    states = PartitionStates()
    states.hearing = lambda: True
    generation = states.generation()  # the read begins
    states.changed()  # a commit is notified while it reads
    states.put(generation, {KEY: _known(5)})  # what it read may predate that commit
    assert states.get([KEY]) == {}
    states.put(states.generation(), {KEY: _known(6)})
    assert states.get([KEY]) == {KEY: _known(6)}


def test_nothing_kept_nor_served_while_the_watcher_is_deaf() -> None:
    states = PartitionStates()
    hearing = [False]
    states.hearing = lambda: hearing[0]
    states.put(states.generation(), {KEY: _known(5)})
    hearing[0] = True
    assert states.get([KEY]) == {}
    states.put(states.generation(), {KEY: _known(5)})
    hearing[0] = False
    assert states.get([KEY]) == {}
