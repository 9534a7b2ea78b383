"""Planner errors. The planner is pure, so the only error is a bad setting."""

from __future__ import annotations


class InvalidPlannerConfigError(ValueError):
    """A planner setting is out of range or unknown."""

    retriable = False
