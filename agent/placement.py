"""Which live agent Metadata names leader of a partition: a pure function of the live set.

Agents are leaderless (any agent serves any partition), but Kafka clients want one leader
per partition. Leaders are spread evenly — consecutive partitions of a topic go to
consecutive agents in node-id order, starting at an offset given by a stable hash of the
topic name (so partition 0 of every topic does not land on the same agent) — and stay put
while the set of live agents is the same. No I/O: the server and tests call it alike.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Sequence

from metadata import AgentInfo


def topic_hash(topic: str) -> int:
    """A hash of the topic name that is the same in every process (CRC32 of its UTF-8)."""
    return zlib.crc32(topic.encode())


def leader(topic: str, partition: int, live: Sequence[AgentInfo]) -> AgentInfo:
    """The agent leading (topic, partition) among `live` (any order); ValueError if none."""
    if not live:
        raise ValueError("no live agents")
    ordered = sorted(live, key=lambda a: a.node_id)
    return ordered[(topic_hash(topic) + partition) % len(ordered)]


def coordinator(group_id: str, live: Sequence[AgentInfo]) -> AgentInfo:
    """The agent FindCoordinator names for a group nobody coordinates yet (it takes the
    group's lease when the group's first request reaches it): spread by a stable hash of
    the group id, as partitions are. ValueError if no agent is live."""
    return leader(group_id, 0, live)


def on_listener(agents: Iterable[AgentInfo], listener: str) -> list[AgentInfo]:
    """The agents a client of `listener` can reach, each with `host`/`port` its endpoint on
    that listener: Kafka's Metadata lists only the brokers having the listener the request
    came in on (its MetadataCache.getAliveBrokerNodes(listenerName))."""
    out = []
    for agent in agents:
        endpoint = agent.endpoint(listener)
        if endpoint is not None:
            out.append(dataclasses.replace(agent, host=endpoint[0], port=endpoint[1]))
    return out
