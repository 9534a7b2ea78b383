"""What keeps a group request from being served here."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class Unavailable(Exception):
    """The request cannot be served here now: answered with `code`."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code
