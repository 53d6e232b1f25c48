"""The one error type of the driver-side pre-flight checks."""

from __future__ import annotations

from app.config.errors import ConfigError


class PreflightError(ConfigError):
    """Something the run needs (a model folder, a reward file, a free port, a cluster) is not usable, found on the
    driver before Ray starts. A ConfigError, so every entry point that reports those reports this the same way: one
    line naming the key, the path or value, and what to change."""
