"""Layer tables on disk as CSV, and the file helpers every layer file format shares.

The CSV holds the layer table's columns plus a ``const_mb`` column carrying
the table's constant and a ``time_unit`` column carrying the unit of its
times, each the same on every row. The MindFormers/SAPP layer description
JSON lives in :mod:`sappkit.layers.mindformers` and reads and writes through
the helpers here.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from .._files import as_path, read_csv, write_text
from ..columns import CONST_MB, LAYER_NUMERIC, LAYER_OPTIONAL, LAYER_REQUIRED, MODULE
from ..errors import InputError
from .options import check_custom_options
from .table import LayerTable, as_layer_table
from .units import TIME_UNIT, check_time_unit

__all__ = ["read_layers_csv", "write_layers_csv"]

_CSV_COLUMNS = (*LAYER_REQUIRED, *LAYER_OPTIONAL, CONST_MB, TIME_UNIT)


def read_layers_csv(path, *, time_unit: str | None = None, custom_options=()) -> LayerTable:
    """Read a layer table CSV (the columns of :class:`~sappkit.LayerTable`, optional ones allowed, plus ``const_mb`` and
    ``time_unit``).

    Empty cells of optional columns take their defaults; ``const_mb``, when
    present, must hold one value on every row (default 0), and so must
    ``time_unit``. ``time_unit`` (the argument) states the unit of the
    file's times; default the file's ``time_unit`` column, else ``"time
    units"``; stating one the file contradicts is refused.
    ``custom_options`` names the recompute options the file may hold beside
    SAPP's five (:class:`~sappkit.LayerTable`); any other is refused.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.csv"
    >>> _ = path.write_text("kind,role,count,param_mb,option,forward_time,backward_time,activation_mb\\n"
    ...                     "block,body,4,900,none,10,20,300\\n")
    >>> read_layers_csv(path).frame[["kind", "module", "working_mb"]]
        kind module  working_mb
    0  block  model         0.0
    >>> read_layers_csv(path, time_unit="ms").time_unit
    'ms'
    """
    path = as_path("path", path)
    if time_unit is not None:
        time_unit = check_time_unit(time_unit)
    custom_options = check_custom_options(custom_options)
    frame = read_csv(path, "a layer table file", "a header row and one row per (kind, option)", dtype=str,
                     keep_default_na=False)
    unknown = [column for column in frame.columns if column not in _CSV_COLUMNS]
    if unknown:
        raise InputError(f"{path}: unknown column(s) {', '.join(map(repr, unknown))}; "
                         f"expected columns among {', '.join(_CSV_COLUMNS)}")
    for column in (*LAYER_NUMERIC, CONST_MB):
        if column in frame.columns:
            frame[column] = [_csv_number(path, row, column, cell) for row, cell in frame[column].items()]
    if MODULE in frame.columns:
        frame[MODULE] = frame[MODULE].replace("", LAYER_OPTIONAL[MODULE])
    const = 0.0
    if CONST_MB in frame.columns:
        values = [float(value) for value in frame.pop(CONST_MB).unique()]
        if len(values) != 1 or math.isnan(values[0]):
            raise InputError(f"{path}: column 'const_mb' holds {values}; expected one number on every row")
        const = values[0]
    unit = time_unit
    if TIME_UNIT in frame.columns:
        stated = frame.pop(TIME_UNIT).unique().tolist()
        if len(stated) != 1:
            raise InputError(f"{path}: column 'time_unit' holds {stated}; expected one unit on every row")
        unit = check_time_unit(stated[0], f"{path}: column 'time_unit'")
        if time_unit is not None and time_unit != unit:
            raise InputError(f"{path}: the file states time_unit {unit!r} but time_unit={time_unit!r} was given; "
                             "drop the argument or correct the file")
    return _table(path, frame, const, unit, custom_options)


def write_layers_csv(layers, path) -> None:
    """Write a layer table as CSV: every layer column, optional ones filled, and ``const_mb`` and ``time_unit``
    on each row.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> rows = [dict(kind="block", role="body", count=4, param_mb=900, option="none", forward_time=10,
    ...              backward_time=20, activation_mb=300)]
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.csv"
    >>> write_layers_csv(LayerTable(pd.DataFrame(rows), const_mb=2000), path)
    >>> read_layers_csv(path).const_mb
    2000.0
    """
    table = as_layer_table(layers)
    frame = table.frame[[*LAYER_REQUIRED, *LAYER_OPTIONAL]].assign(**{CONST_MB: table.const_mb,
                                                                      TIME_UNIT: table.time_unit})
    write_text(path, frame.to_csv(index=False))


def _table(path: Path, frame: pd.DataFrame, const: float, time_unit: str | None, custom_options=()) -> LayerTable:
    try:
        return LayerTable(frame, const_mb=const, time_unit=time_unit, custom_options=custom_options)
    except InputError as error:
        raise error.with_prefix(f"{path}: ") from None


def _csv_number(path: Path, row: int, column: str, cell: str) -> float:
    if cell == "" and column not in LAYER_REQUIRED:
        return math.nan
    try:
        return float(cell)
    except ValueError:
        raise InputError(f"{path}: row {row} column {column!r} is {cell!r}; expected a number") from None
