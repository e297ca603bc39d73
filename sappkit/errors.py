"""The one exception sappkit raises for bad input."""

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad user input: the message names the argument, the row or key, the value and the expectation.

    Where the fix it suggests is an argument, ``cli`` holds the same message
    naming the command line's flag instead (``--force`` for ``force=True``);
    the ``sappkit`` command prints that one.

    Examples
    --------
    >>> error = InputError("out exists; pass force=True to replace it", cli="--out exists; add --force to replace it")
    >>> str(error), error.cli
    ('out exists; pass force=True to replace it', '--out exists; add --force to replace it')
    """

    def __init__(self, message: str = "", *, cli: str | None = None):
        super().__init__(message)
        self.cli = cli

    def with_prefix(self, prefix: str) -> "InputError":
        """The same error with ``prefix`` (e.g. a file's path and a colon) before both of its messages."""
        return InputError(f"{prefix}{self}", cli=None if self.cli is None else f"{prefix}{self.cli}")
