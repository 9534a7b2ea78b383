"""Errors of the settings layer: one type for every bad setting, whatever its source."""

from __future__ import annotations


class SettingError(ValueError):
    """A setting is unknown or its value is not allowed; the message is one line naming the
    key and what is allowed. Components' own config errors are this type or subclasses."""

    retriable = False
