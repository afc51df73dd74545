"""The error a setting raises when its value cannot be used."""

from __future__ import annotations

from lightfoot_pipeline.errors import LightfootError


class SettingsError(LightfootError, ValueError):
    """A setting (an environment variable, an option) whose value cannot be used."""
