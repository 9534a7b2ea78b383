"""What DescribeConfigs and IncrementalAlterConfigs share: Kafka's resource types, config
sources and types, and which broker (agent) a BROKER resource names."""

from __future__ import annotations

import enum

from kio.static.primitive import i8

from ..context import ServerContext


class ResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids (the ones siltstream answers for)."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


# Kafka's ConfigDef.Type as DescribeConfigs v3+ numbers it.
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
                "LIST": 7, "CLASS": 8, "PASSWORD": 9}


def config_type(name: str) -> i8:
    return i8(CONFIG_TYPES.get(name, 0))


def broker_error(ctx: ServerContext, name: str) -> str | None:
    """Why a BROKER resource `name` is not this agent's (None: it is). As Kafka: the broker's
    own id, or the empty name (cluster-wide defaults, which are this agent's settings)."""
    me = None if ctx.registration is None or ctx.registration.info is None else str(
        ctx.registration.info.node_id)
    if name in ("", me):
        return None
    return f"unexpected broker id, expected {me} or empty string, but received {name!r}"
