"""The one exception sappkit raises for bad input."""

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad user input: the message names the argument, the row or key, the value and the expectation."""
