"""Kafka 4.0's group configs (GroupConfig, KIP-848/KIP-932): the configs AlterConfigs and
IncrementalAlterConfigs may set on a GROUP resource, checked as Kafka's controller checks
them (GroupConfig.validate: the names, each value's type and bound, the broker's min and max
of each timeout, a session timeout above its heartbeat interval: INVALID_CONFIG), and kept
in the metadata store (`dynamic_configs`, dynconfigs.py) for any group id, existing or not,
as Kafka keeps them.

They govern consumer-protocol (KIP-848) and share (KIP-932) groups, which silt does not
serve (its groups are all classic): STORED and DESCRIBED (GROUP_CONFIG), NOT APPLIED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from . import dynconfigs
from .engine import Database
from .errors import InvalidConfigError
from .topicconfig import AlterOp, ConfigChange

GROUP = 32  # Kafka's ConfigResource.Type id of a GROUP resource


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    """One group config: Kafka's default, type, the broker config it defaults to (None:
    none) and the bounds Kafka's broker defaults allow (its min and max configs)."""

    default: str
    kind: str
    broker: str | None
    lo: int | None = None
    hi: int | None = None


# Kafka 4.0's GroupConfig, in its order, with GroupCoordinatorConfig's and
# ShareGroupConfig's default bounds.
GROUP_CONFIGS: Mapping[str, GroupConfigDef] = {
    "consumer.session.timeout.ms": GroupConfigDef(
        "45000", "INT", "group.consumer.session.timeout.ms", 45_000, 60_000),
    "consumer.heartbeat.interval.ms": GroupConfigDef(
        "5000", "INT", "group.consumer.heartbeat.interval.ms", 5_000, 15_000),
    "share.session.timeout.ms": GroupConfigDef(
        "45000", "INT", "group.share.session.timeout.ms", 45_000, 60_000),
    "share.heartbeat.interval.ms": GroupConfigDef(
        "5000", "INT", "group.share.heartbeat.interval.ms", 5_000, 15_000),
    "share.record.lock.duration.ms": GroupConfigDef(
        "30000", "INT", "group.share.record.lock.duration.ms", 15_000, 60_000),
    "share.auto.offset.reset": GroupConfigDef("latest", "STRING", None),
}
_OFFSET_RESETS = ("earliest", "latest")
# The heartbeat interval each session timeout must exceed.
_ABOVE = {"consumer.session.timeout.ms": "consumer.heartbeat.interval.ms",
          "share.session.timeout.ms": "share.heartbeat.interval.ms"}


def validate(configs: Mapping[str, str]) -> None:
    """Kafka's GroupConfig.validate of a group's whole set (InvalidConfigError, Kafka's
    words)."""
    for name in configs:
        if name not in GROUP_CONFIGS:
            raise InvalidConfigError(f"Unknown group config name: {name}")
    values: dict[str, int] = {}
    for name, spec in GROUP_CONFIGS.items():
        text = configs.get(name, spec.default).strip()
        if spec.kind == "STRING":
            if text.lower() not in _OFFSET_RESETS:
                raise InvalidConfigError(f"Invalid value {text} for configuration {name}:"
                                         f" String must be one of: {', '.join(_OFFSET_RESETS)}")
            continue
        try:
            values[name] = int(text, 10)
        except ValueError:
            raise InvalidConfigError(f"Invalid value {text} for configuration {name}: Not a"
                                     " number of type INT") from None
        broker = spec.broker or name
        if spec.lo is not None and values[name] < spec.lo:
            raise InvalidConfigError(f"{name} must be greater than or equal to"
                                     f" {_bound(broker, 'min')}")
        if spec.hi is not None and values[name] > spec.hi:
            raise InvalidConfigError(f"{name} must be less than or equal to"
                                     f" {_bound(broker, 'max')}")
    for session, heartbeat in _ABOVE.items():
        if values[session] <= values[heartbeat]:
            raise InvalidConfigError(f"{session} must be greater than {heartbeat}")


def _bound(broker: str, which: str) -> str:
    """Kafka's broker config bounding a group config's (`broker`): its `which` (min, max),
    as group.consumer.min.session.timeout.ms bounds group.consumer.session.timeout.ms."""
    group, kind, rest = broker.split(".", 2)
    return f"{group}.{kind}.{which}.{rest}"


def apply_changes(stored: Mapping[str, str], changes: Sequence[ConfigChange]
                  ) -> dict[str, str]:
    """The set after `changes` (SET, DELETE; no group config is a list, so APPEND and
    SUBTRACT are refused as Kafka's ConfigurationControlManager refuses them)."""
    out = dict(stored)
    for c in changes:
        if c.op is AlterOp.SET:
            out[c.key] = c.value or ""
        elif c.op is AlterOp.DELETE:
            out.pop(c.key, None)
        else:
            raise InvalidConfigError(
                f"Can't {c.op.name} to key {c.key} because its type is not LIST.")
    return out


def group_configs(db: Database, group: str) -> dict[str, str]:
    """The configs stored for group `group` (none: Kafka's defaults apply)."""
    return dynconfigs.read(db, GROUP, (group,)).get(group, {})


def alter_group_configs(db: Database, group: str, changes: Sequence[ConfigChange], *,
                        replace: bool = False, validate_only: bool = False
                        ) -> dict[str, str]:
    """Apply `changes` to group `group`'s configs (`replace`: to none, as the legacy
    AlterConfigs), check the new set (`validate`) and store it (not with `validate_only`);
    returns it. InvalidConfigError commits nothing."""

    def compute(conn: sa.Connection) -> dict[str, str]:
        current = {} if replace else dynconfigs.stored(conn, GROUP, (group,)).get(group, {})
        configs = apply_changes(current, changes)
        validate(configs)
        return configs

    return dynconfigs.replace(db, GROUP, group, compute, validate_only=validate_only)
