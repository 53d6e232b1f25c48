"""The one error type of configuration checks (a leaf: every config module and entry point imports it from here)."""


class ConfigError(ValueError):
    """A configuration value is wrong. The message names the dotted key, the value and what was expected."""
