"""Checks of the frames users pass in: the frame and its columns, whole numbers, finite numbers, names.

Messages name the argument, the row, the column, the bad value and what was
expected. ``where`` (a function of the row) names a row the way its frame
does (``layers row 3 (kind 'block')``); by default ``<name> row <row>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from ._check import short
from .errors import InputError
from .limits import Limit

__all__ = ["check_frame", "check_columns", "whole_column", "number_column", "name_column", "plain"]

Where = Callable[[int], str]


def check_frame(frame, name: str, required, what: str, *, numeric=(), gaps=(), whole=(),
                rows: bool = False) -> pd.DataFrame:
    """Raise unless ``frame`` is a DataFrame with one level of distinct column names, ``required`` among them.

    What a drawing of the frame reads, in the columns present: ``numeric`` columns hold finite numbers, ``gaps``
    columns finite numbers or NaN where there is none, ``whole`` columns whole numbers >= 0; with ``rows`` the
    frame needs a row. Returns the frame with those columns as numbers.
    """
    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"{name} must be a DataFrame with columns {', '.join(required)}; "
                         f"got {type(frame).__name__}")
    check_columns(frame, name, what)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(f"{name} is missing column(s) {', '.join(map(repr, missing))}; "
                         f"{what} needs {', '.join(required)}")
    if rows and frame.empty:
        raise InputError(f"{name} has no rows; expected {what} with a row per stage")
    converted = {}
    for column in (c for c in (*numeric, *gaps) if c in frame.columns):
        values, booleans = _numbers(frame, column)
        gap = np.isnan(values) & frame[column].isna().to_numpy() if column in gaps else np.zeros(len(frame), bool)
        bad = booleans | (~np.isfinite(values) & ~gap)
        if bad.any():
            _refuse(frame, column, name, None, bad, "a finite number" + (" or NaN" if column in gaps else ""))
        converted[column] = values
    for column in (c for c in whole if c in frame.columns):
        converted[column] = whole_column(frame, column, name)
    if not converted:
        return frame
    frame = frame.copy()
    for column, values in converted.items():
        frame[column] = values
    return frame


def check_columns(frame: pd.DataFrame, name: str, what: str) -> None:
    """Raise unless ``frame`` has one level of column names, each once (``what`` names such a frame)."""
    if isinstance(frame.columns, pd.MultiIndex):
        raise InputError(f"{name} has {frame.columns.nlevels} levels of column names; {what} has one level "
                         f"(flatten them, e.g. frame.columns = frame.columns.get_level_values(0))")
    repeated = frame.columns[frame.columns.duplicated()]
    if len(repeated):
        raise InputError(f"{name} has column {short(repeated[0])} {int((frame.columns == repeated[0]).sum())} "
                         "times; expected each column once")


def _numbers(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """The column as floats (NaN where not a number) and where it holds a bool, which is not a number here."""
    series = frame[column]
    if series.dtype == bool:
        booleans = np.ones(len(series), dtype=bool)
    elif series.dtype == object:
        booleans = np.array([isinstance(value, bool | np.bool_) for value in series], dtype=bool)
    else:
        booleans = np.zeros(len(series), dtype=bool)
    try:
        values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    except (OverflowError, TypeError, ValueError):  # an int too large for a float, an odd object
        values = np.array([_as_float(value) for value in series], dtype=float)
    return values, booleans


def _as_float(value) -> float:
    """A cell as a float: inf when too large for one, NaN when not a number."""
    try:
        return float(value)
    except OverflowError:
        return math.inf
    except (TypeError, ValueError):
        return math.nan


def _refuse(frame: pd.DataFrame, column: str, name: str, where: Where | None, bad: np.ndarray, expected: str):
    row = int(np.flatnonzero(bad)[0])
    place = where(row) if where is not None else f"{name} row {row}"
    raise InputError(f"{place} column {column!r} is {short(plain(frame[column].iloc[row]))}; expected {expected}")


def whole_column(frame: pd.DataFrame, column: str, name: str, upper: int | None = None, *, minimum: int = 0,
                 maximum: Limit | None = None, where: Where | None = None) -> np.ndarray:
    """``frame[column]`` as ints, or raise naming the first row that is not a whole number in range.

    ``upper`` (exclusive) bounds values by the input's own shape (stages of a
    pipeline); ``maximum`` (inclusive) by a :mod:`sappkit.limits` limit.
    """
    values, booleans = _numbers(frame, column)
    with np.errstate(invalid="ignore"):
        bad = booleans | ~np.isfinite(values) | (values < minimum) | (values % 1 != 0)
        if upper is not None:
            bad |= values >= upper
    if bad.any():
        expected = f"a whole number >= {minimum}" if upper is None else f"a whole number in {minimum}..{upper - 1}"
        _refuse(frame, column, name, where, bad, expected)
    if maximum is not None and (values > maximum).any():
        _refuse(frame, column, name, where, values > maximum, f"at most {maximum.cited}")
    return values.astype(int)


def number_column(frame: pd.DataFrame, column: str, name: str, *, strict: bool = False,
                  maximum: Limit | None = None, where: Where | None = None, expected: str | None = None) -> np.ndarray:
    """``frame[column]`` as floats, or raise naming the first row that is not a finite number >= 0 (> 0: ``strict``).

    ``expected`` words the expectation for the message (default ``a finite number >= 0``).
    """
    values, booleans = _numbers(frame, column)
    with np.errstate(invalid="ignore"):
        bad = booleans | ~np.isfinite(values) | ((values <= 0) if strict else (values < 0))
    if bad.any():
        _refuse(frame, column, name, where, bad, expected or f"a finite number {'>' if strict else '>='} 0")
    if maximum is not None and (values > maximum).any():
        _refuse(frame, column, name, where, values > maximum, f"at most {maximum.cited}")
    return values


def name_column(frame: pd.DataFrame, column: str, name: str, *, where: Where | None = None) -> np.ndarray:
    """``frame[column]`` as strings, or raise naming the first row whose name is missing (None, NaN, '').

    Names are strings or whole numbers (a run numbered 1); numbers are read as their text.
    """
    values = frame[column].tolist()
    bad = np.array([not ((isinstance(v, str) and v.strip()) or (isinstance(v, int | np.integer)
                                                                and not isinstance(v, bool | np.bool_)))
                    for v in values], dtype=bool)
    if bad.any():
        _refuse(frame, column, name, where, bad, "a non-empty name")
    return np.array([str(v) for v in values], dtype=object)


def plain(value):
    """A numpy scalar as its Python value, so messages read ``2.5`` rather than ``np.float64(2.5)``."""
    return value.item() if isinstance(value, np.generic) else value
