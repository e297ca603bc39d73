"""Checks of the frames users pass in: the frame and its columns, whole numbers, finite numbers.

Messages name the argument, the row, the column, the bad value and what was expected.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .errors import InputError

__all__ = ["check_frame", "whole_column", "number_column", "plain"]


def check_frame(frame, name: str, required, what: str) -> None:
    """Raise unless ``frame`` is a DataFrame with the ``required`` columns (``what`` names such a frame)."""
    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"{name} must be a DataFrame with columns {', '.join(required)}; "
                         f"got {type(frame).__name__}")
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(f"{name} is missing column(s) {', '.join(map(repr, missing))}; "
                         f"{what} needs {', '.join(required)}")


def whole_column(frame: pd.DataFrame, column: str, name: str, upper: int | None = None) -> np.ndarray:
    """``frame[column]`` as ints, or raise naming ``name``'s first row that is not a whole number in range."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < 0) | (values % 1 != 0)
        if upper is not None:
            bad |= values >= upper
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        expected = "a whole number >= 0" if upper is None else f"a whole number in 0..{upper - 1}"
        raise InputError(f"{name} row {row} column {column!r} is {plain(frame[column].iloc[row])!r}; "
                         f"expected {expected}")
    return values.astype(int)


def number_column(frame: pd.DataFrame, column: str, name: str) -> np.ndarray:
    """``frame[column]`` as floats, or raise naming ``name``'s first row that is not a finite number >= 0."""
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"{name} row {row} column {column!r} is {plain(frame[column].iloc[row])!r}; "
                         "expected a finite number >= 0")
    return values


def plain(value):
    """A numpy scalar as its Python value, so messages read ``2.5`` rather than ``np.float64(2.5)``."""
    return value.item() if isinstance(value, np.generic) else value
