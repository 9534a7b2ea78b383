"""Planner errors. The planner is pure, so the only error is a bad setting: the settings
layer's one error type, under the name callers know."""

from __future__ import annotations

from settings.errors import SettingError

InvalidPlannerConfigError = SettingError
