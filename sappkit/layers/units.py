"""The unit a layer table's times are in, and how times and memory read in text.

Memory is always MB (MiB). Times are in the input's own unit, which the
layer table knows (:attr:`sappkit.LayerTable.time_unit`): ``ms`` for
:func:`sappkit.estimate_layers`, :func:`sappkit.torch.measure_layers` and the
bundled tables; :data:`MINDFORMERS_UNIT` for a MindFormers layer JSON that
does not state one (its ``time`` values are relative); whatever the user
states; :data:`UNSTATED` otherwise. Every result built from a table carries
its unit on, and a frame carries it in ``frame.attrs["time_unit"]``
(:func:`time_unit_of`), so a plain frame handed on keeps it.

Examples
--------
>>> format_time(5765.99, "ms"), format_mb(56017.07)
('5,766 ms', '56,017 MB')
"""

from __future__ import annotations

import math

import pandas as pd

from .._check import short
from ..errors import InputError

__all__ = ["TIME_UNIT", "MS", "MINDFORMERS_UNIT", "UNSTATED", "MAX_UNIT_LENGTH", "check_time_unit", "time_unit_of",
           "with_time_unit", "format_time", "format_mb", "format_number"]

#: The key a unit goes under: a frame's ``attrs``, the layer JSON's top level, a layer CSV's column.
TIME_UNIT = "time_unit"
#: Milliseconds per micro-batch: the estimates', the measurements' and the bundled tables' unit.
MS = "ms"
#: The relative unit of a MindFormers layer JSON's ``time`` values, when the file states no unit.
MINDFORMERS_UNIT = "MindFormers units"
#: The unit of times nobody stated (a plain frame without ``attrs["time_unit"]``).
UNSTATED = "time units"
#: Units longer than this are refused: a unit is a short label that follows a number.
MAX_UNIT_LENGTH = 24


def check_time_unit(value, name: str = "time_unit") -> str:
    """``value`` when it is a time unit: a non-empty, single-line string of at most 24 characters.

    Examples
    --------
    >>> check_time_unit("us")
    'us'
    >>> check_time_unit("")
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: time_unit must be a short name such as 'ms' or 'us' (a non-empty string of at most 24 characters on one line, without leading or trailing spaces); got ''
    """
    if (not isinstance(value, str) or not value or len(value) > MAX_UNIT_LENGTH or value != value.strip()
            or not value.isprintable()):
        raise InputError(f"{name} must be a short name such as 'ms' or 'us' (a non-empty string of at most "
                         f"{MAX_UNIT_LENGTH} characters on one line, without leading or trailing spaces); "
                         f"got {short(value)}")
    return value


def time_unit_of(frame: pd.DataFrame, default: str = UNSTATED) -> str:
    """The unit ``frame.attrs["time_unit"]`` states (checked), else ``default``."""
    unit = frame.attrs.get(TIME_UNIT) if isinstance(frame, pd.DataFrame) else None
    return default if unit is None else check_time_unit(unit, "frame.attrs['time_unit']")


def with_time_unit(frame: pd.DataFrame, unit: str) -> pd.DataFrame:
    """``frame`` with ``attrs["time_unit"]`` set to ``unit`` (the frame itself, changed in place)."""
    frame.attrs[TIME_UNIT] = unit
    return frame


def format_number(value: float) -> str:
    """A number as text: thousands separated, whole from 100 up, else one or two decimals (``n/a`` for NaN).

    Examples
    --------
    >>> [format_number(v) for v in (5765.99, 118.14, 42.86, 2.863, 0.0, -1.5)]
    ['5,766', '118', '42.9', '2.86', '0', '-1.50']
    """
    if value is None or math.isnan(value):
        return "n/a"
    if value == 0:
        return "0"
    size = abs(value)
    return f"{value:,.0f}" if size >= 100 else f"{value:.1f}" if size >= 10 else f"{value:.2f}"


def format_time(value: float, unit: str) -> str:
    """A time and its unit: ``5,766 ms``."""
    return f"{format_number(value)} {unit}"


def format_mb(value: float) -> str:
    """Memory in MB, thousands separated: ``56,017 MB``."""
    return f"{format_number(value)} MB"
