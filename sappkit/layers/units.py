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
import textwrap

import pandas as pd

from .._check import short
from ..errors import InputError

__all__ = ["TIME_UNIT", "MS", "MINDFORMERS_UNIT", "UNSTATED", "MAX_UNIT_LENGTH", "MS_PER_UNIT", "check_time_unit",
           "time_unit_of", "with_time_unit", "ms_per_unit", "format_time", "format_mb", "format_number", "format_share",
           "is_time_column", "labelled", "text_table", "TEXT_WIDTH", "wrap_text", "html_summary", "chunks_text",
           "layer_ranges"]

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
#: Columns a line of text for people takes at most: a terminal's, and a notebook's printouts.
TEXT_WIDTH = 100
#: Milliseconds per unit of the units whose length is known (a host link's bandwidth needs it).
MS_PER_UNIT = {"s": 1000.0, "ms": 1.0, "us": 0.001}


def check_time_unit(value, name: str = "time_unit") -> str:
    """``value`` when it is a time unit: a non-empty, single-line string of at most 24 characters.

    Examples
    --------
    >>> check_time_unit("us")
    'us'
    >>> check_time_unit("")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sappkit.errors.InputError: time_unit must be a short name such as 'ms' or 'us' (...); got ''
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


def ms_per_unit(unit: str, given: float | None, *, name: str = "time_unit_ms") -> float:
    """Milliseconds per time unit: ``given`` when stated, else known from ``unit`` (``s``, ``ms``, ``us``).

    Examples
    --------
    >>> ms_per_unit("us", None), ms_per_unit("MindFormers units", 0.5)
    (0.001, 0.5)
    """
    if given is not None:
        return given
    if unit not in MS_PER_UNIT:
        raise InputError(f"{name} is needed: the layer table's times are in {unit!r}, whose length in ms sappkit "
                         f"cannot know (it knows {', '.join(map(repr, MS_PER_UNIT))}); state how many ms one "
                         "time unit is")
    return MS_PER_UNIT[unit]


def format_number(value: float) -> str:
    """A number as text: thousands separated, whole from 100 up (and when whole), else one or two decimals.

    Examples
    --------
    >>> [format_number(v) for v in (5765.99, 118.14, 42.86, 2.863, 7.0, 0.0, -1.5, -1e-12, float("nan"))]
    ['5,766', '118', '42.9', '2.86', '7', '0', '-1.50', '0', 'n/a']
    """
    if value is None or math.isnan(value):
        return "n/a"
    size = abs(value)
    if size < 0.005:  # what would show as 0.00 (float noise of sums among it) is 0
        return "0"
    if size >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.1f}" if size >= 10 else f"{value:.2f}"


def wrap_text(text: str, width: int = TEXT_WIDTH) -> str:
    """``text`` with each line longer than ``width`` wrapped at spaces, its continuations indented two more.

    A word longer than the width (a path) stays whole on its own line.

    Examples
    --------
    >>> print(wrap_text("peak 58,258 MB on stage 2; the plan fits every stage within its limit", 30))
    peak 58,258 MB on stage 2; the
      plan fits every stage within
      its limit
    """
    lines = []
    for line in str(text).split("\n"):
        indent = " " * (len(line) - len(line.lstrip(" ")))
        lines.append(textwrap.fill(line, width, subsequent_indent=indent + "  ", break_on_hyphens=False,
                                   break_long_words=False) if len(line) > width else line)
    return "\n".join(lines)


def chunks_text(texts: list[str]) -> str:
    """What a stage holds, one text per chunk: the text alone for one chunk, else each after ``chunk c:``.

    Examples
    --------
    >>> chunks_text(["none x3"]), chunks_text(["full x2", "none x3"])
    ('none x3', 'chunk 0: full x2; chunk 1: none x3')
    """
    return texts[0] if len(texts) == 1 else "; ".join(f"chunk {c}: {text}" for c, text in enumerate(texts))


def layer_ranges(indices) -> str:
    """Body layer indices as sorted ranges, the way trainer plans key them.

    Examples
    --------
    >>> layer_ranges([5, 0, 1, 7, 8, 9])
    '0-1, 5, 7-9'
    """
    parts, run = [], []
    for index in sorted(int(i) for i in indices):
        if run and index != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(index)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(parts)


def format_time(value: float, unit: str) -> str:
    """A time and its unit: ``5,766 ms``."""
    return f"{format_number(value)} {unit}"


def format_share(value: float, of: str = "") -> str:
    """A fraction ``of`` something as people read it: a percentage below one, a multiple from one on (a bubble
    can be longer than the compute it waits on, and ``192.1% of the compute`` reads as a mistake).

    Examples
    --------
    >>> format_share(0.556, of="the compute"), format_share(1.921, of="the compute"), format_share(0.05)
    ('55.6% of the compute', '1.92x the compute', '5.0%')
    """
    text = f"{value:.1%}" if value < 1 else f"{value:.2f}x"
    return f"{text}{' of' if value < 1 else ''} {of}" if of else text


def format_mb(value: float) -> str:
    """Memory in MB, thousands separated: ``56,017 MB``."""
    return f"{format_number(value)} MB"


def is_time_column(name) -> bool:
    """Whether a column holds times by its name: ``time``, ``*_time``, ``time_*`` (``time_saved``, ``time_cost``),
    and a balancer's ``objective`` (a stage time or a step time)."""
    name = str(name)
    return name in ("time", "objective") or name.endswith("_time") or name.startswith("time_")


def labelled(frame: pd.DataFrame, unit: str | None = None, *, headers: dict | None = None) -> pd.DataFrame:
    """A copy of ``frame`` to show people: each time column's name followed by its unit (``step_time (ms)``).

    The frame's own columns keep their names (they are the contract);
    this is for display, e.g. in a notebook. ``unit`` defaults to the
    frame's own (:func:`time_unit_of`); ``headers`` renames columns first.

    Examples
    --------
    >>> frame = with_time_unit(pd.DataFrame({"stage": [0], "step_time": [5765.99]}), "ms")
    >>> list(labelled(frame).columns)
    ['stage', 'step_time (ms)']
    """
    unit = time_unit_of(frame) if unit is None else unit
    headers = headers or {}
    return frame.rename(columns={name: str(headers.get(name, name)) + (f" ({unit})" if is_time_column(name) else "")
                                 for name in frame.columns})


def text_table(frame: pd.DataFrame, unit: str | None = None, *, headers: dict | None = None) -> str:
    """A frame as text for a terminal: time columns headed with their unit, numbers thousands separated.

    Numbers are thousands separated, with one number of decimals per column:
    what :func:`format_number` gives the column's largest magnitude (none
    from 100 up, one from 10, two below), none in a column of whole numbers.
    Text is left-aligned and numbers right-aligned, a missing value reads
    ``-``. ``unit`` defaults to the frame's own (:func:`time_unit_of`);
    ``headers`` renames columns before the unit is added.

    Examples
    --------
    >>> frame = pd.DataFrame({"stage": [0, 1], "memory_mb": [56017.07, 9.5], "time_saved": [1.234, None],
    ...                       "step_time": [7.0, 12.94]})
    >>> print(text_table(frame, "ms", headers={"time_saved": "saved"}))
    stage  memory_mb  saved (ms)  step_time (ms)
        0     56,017        1.23             7.0
        1         10           -            12.9
    """
    columns = []
    for title, name in zip(labelled(frame, unit, headers=headers).columns, frame.columns):
        values = frame[name].tolist()
        numeric = all(_is_number(v) or _missing(v) for v in values) and not all(_missing(v) for v in values)
        cells = _number_cells(values) if numeric else [_cell(v) for v in values]
        width = max([len(title), *map(len, cells)])
        align = str.rjust if numeric else str.ljust
        columns.append([align(title, width), *(align(cell, width) for cell in cells)])
    return "\n".join("  ".join(row).rstrip() for row in zip(*columns)) if columns else ""


def html_summary(lines, frame: pd.DataFrame, unit: str | None = None) -> str:
    """A result as a notebook shows it: its headline ``lines`` as paragraphs, then ``frame`` (times labelled with
    their unit, numbers rounded to one decimal) as a table.

    Examples
    --------
    >>> html = html_summary(["peak 56,017 MB"], pd.DataFrame({"stage": [0], "memory_mb": [56017.07]}))
    >>> html.startswith("<p>peak 56,017 MB</p>"), "<table" in html
    (True, True)
    """
    import html

    paragraphs = "".join(f"<p>{html.escape(line)}</p>" for line in lines)
    return paragraphs + labelled(frame.round(1), unit).to_html(index=False)


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _is_number(value) -> bool:
    """An int or float (numpy's too), not a bool."""
    if isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b":
        return False
    return isinstance(value, int | float) or getattr(getattr(value, "dtype", None), "kind", "") in ("i", "u", "f")


def _number_cells(values: list) -> list[str]:
    """A numeric column's cells, all with the decimals its largest magnitude takes (:func:`text_table`)."""
    present = [float(v) for v in values if not _missing(v)]
    finite = [abs(v) for v in present if math.isfinite(v)]
    if all(v.is_integer() for v in present if math.isfinite(v)) or not finite:
        decimals = 0
    else:
        decimals = 0 if max(finite) >= 99.5 else 1 if max(finite) >= 9.995 else 2
    return ["-" if _missing(v) else format_number(float(v)) if not math.isfinite(float(v))
            else f"{0.0 if abs(float(v)) < 0.5 * 10 ** -decimals else float(v):,.{decimals}f}" for v in values]


def _cell(value) -> str:
    if _missing(value):
        return "-"
    return format_number(float(value)) if _is_number(value) else str(value)
