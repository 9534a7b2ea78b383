"""What keeps a group request from being served by this agent now: one class per condition,
each answered through its row of the one error table (agent/protocol/errors.py `CODES`),
which the coordinator is given (`Coordinator(codes=...)`)."""

from __future__ import annotations

from typing import Final

from metadata.errors import GroupCoordinatedElsewhereError


class CoordinatorClosingError(Exception):
    """This agent is shutting down: the client looks the coordinator up again (Kafka's
    NOT_COORDINATOR)."""


class CoordinatorNotRegisteredError(Exception):
    """This agent has not registered yet, so it has no id to lease groups under (Kafka's
    COORDINATOR_NOT_AVAILABLE: the client retries)."""


UNSERVED: Final = (CoordinatorClosingError, CoordinatorNotRegisteredError,
                   GroupCoordinatedElsewhereError)
"""Every condition that keeps a group request from being served here now (another live
agent holding the group's lease is the metadata store's `GroupCoordinatedElsewhereError`)."""
