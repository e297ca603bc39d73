"""Layer tables on disk as CSV, and the file helpers every layer file format shares.

The CSV holds the layer table's columns plus a ``const_mb`` column carrying
the table's constant on every row. The MindFormers/SAPP layer description
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
from .table import LayerTable, as_layer_table

__all__ = ["read_layers_csv", "write_layers_csv"]

_CSV_COLUMNS = (*LAYER_REQUIRED, *LAYER_OPTIONAL, CONST_MB)


def read_layers_csv(path) -> LayerTable:
    """Read a layer table CSV (the columns of DESIGN.md, optional ones allowed, plus ``const_mb``).

    Empty cells of optional columns take their defaults; ``const_mb``, when
    present, must hold one value on every row (default 0).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "model.csv"
    >>> _ = path.write_text("kind,role,count,param_mb,option,forward_time,backward_time,activation_mb\\n"
    ...                     "block,body,4,900,none,10,20,300\\n")
    >>> read_layers_csv(path).frame[["kind", "module", "working_mb"]]
        kind module  working_mb
    0  block  model         0.0
    """
    path = as_path("path", path)
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
    return _table(path, frame, const)


def write_layers_csv(layers, path) -> None:
    """Write a layer table as CSV: every layer column, optional ones filled, and ``const_mb`` on each row.

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
    frame = table.frame[[*LAYER_REQUIRED, *LAYER_OPTIONAL]].assign(**{CONST_MB: table.const_mb})
    write_text(path, frame.to_csv(index=False))


def _table(path: Path, frame: pd.DataFrame, const: float) -> LayerTable:
    try:
        return LayerTable(frame, const_mb=const)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


def _csv_number(path: Path, row: int, column: str, cell: str) -> float:
    if cell == "" and column not in LAYER_REQUIRED:
        return math.nan
    try:
        return float(cell)
    except ValueError:
        raise InputError(f"{path}: row {row} column {column!r} is {cell!r}; expected a number") from None
