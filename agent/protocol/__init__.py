"""The Kafka wire-protocol server of `silt agent`: stock Kafka clients produce and fetch.

server.py frames and dispatches requests (one table, apis/__init__.py, lists each API's
handler and versions); context.py holds what handlers share (the Agent, the segment cache,
the broker list seam, commit notifications); one module per API under apis/.
"""

from .context import EffectiveSetting, ServerContext
from .server import Server, serve

__all__ = ["EffectiveSetting", "Server", "ServerContext", "serve"]
