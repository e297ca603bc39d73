"""Whether this run is CI's: there a missing extra fails instead of skipping, and the fuzz seed is fresh."""

import os

__all__ = ["in_ci"]


def in_ci() -> bool:
    """Whether the ``CI`` environment variable says this is a CI run (set, and not ``0``, ``false`` or ``no``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
