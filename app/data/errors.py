"""The one error type for bad dataset input; raised while loading, before any worker starts."""


class DataError(ValueError):
    """A dataset file, row, column or option is unusable. The message names which and why."""
