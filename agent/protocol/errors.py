"""Errors of the protocol server."""

from __future__ import annotations


class ProtocolError(Exception):
    """A connection sent bytes that are not a request this server accepts (garbage, a
    truncated or oversize frame, an unknown API key or version): that connection is closed."""
