"""How a sub-command prints: lines and narrow tables for a terminal, or one document for a machine.

Every command that prints tables takes ``--wide`` (every column, not only the
key ones) and ``--format text|csv|json``. Text fits :data:`WIDTH` columns:
sentences are wrapped, tables show their key columns with the time unit in
the header (:func:`sappkit.layers.units.text_table`), and a column that is
empty on every row is left out. ``csv`` prints the command's main table;
``json`` one object with the headline values and every table as a list of
records (times in ``time_unit``, memory in MB).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pandas as pd

from ..layers.units import TEXT_WIDTH, text_table, wrap_text

__all__ = ["WIDTH", "FORMATS", "STAGE_TIME_HEADER", "add_output_arguments", "Output"]

#: Columns a terminal gives the default output.
WIDTH = TEXT_WIDTH
FORMATS = ("text", "csv", "json")
#: The header every command gives a stage frame's ``time``, sappkit's one stage time (docs/design.md "Time and the
#: objectives"): the forward + backward of one micro-batch through the stage, head and tail included.
STAGE_TIME_HEADER = "time per micro-batch"


def add_output_arguments(parser, *, main: str) -> None:
    """``--wide`` and ``--format``; ``main`` names the table ``--format csv`` prints."""
    parser.add_argument("--wide", action="store_true",
                        help="show every column of the tables, not only the key ones (wider than 100 columns)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help=f"text for people (default); csv prints the {main} table, json everything, for other "
                             "programs")


class Output:
    """What a command prints, gathered in the order it says it and printed as ``args.format`` asks.

    ``line`` and ``table`` print at once in text; ``value`` and ``keep`` only go
    into the JSON document; :meth:`finish` prints the CSV or JSON at the end.
    ``time_unit`` is the unit of the tables' times (None for a command that
    prints no times).
    """

    def __init__(self, args, time_unit: str | None = None):
        self.format = getattr(args, "format", "text")
        self.wide = getattr(args, "wide", False)
        self.time_unit = time_unit
        self.values: dict = {} if time_unit is None else {"time_unit": time_unit}
        self.tables: dict[str, pd.DataFrame] = {}

    @property
    def text(self) -> bool:
        return self.format == "text"

    def line(self, text: str = "") -> None:
        """Sentences for people: each line wrapped at :data:`WIDTH` columns (continuations indented)."""
        if self.text:
            print(wrap_text(text, WIDTH))

    def raw(self, text: str) -> None:
        """Text printed as it is (a config to paste, whose lines must not be re-wrapped)."""
        if self.text:
            print(text)

    def value(self, name: str, value) -> None:
        """A headline value for the JSON document (NaN as null)."""
        self.values[name] = None if isinstance(value, float) and math.isnan(value) else value

    def keep(self, name: str, frame: pd.DataFrame) -> None:
        """A table for the JSON document only."""
        self.tables[name] = frame

    def table(self, name: str, frame: pd.DataFrame, *, key: Sequence[str] = (), headers: dict | None = None,
              machine: pd.DataFrame | None = None) -> None:
        """Print ``frame`` (its ``key`` columns unless ``--wide``) and keep it, or ``machine``, for CSV and JSON."""
        self.tables[name] = frame if machine is None else machine
        if not self.text:
            return
        shown = frame if self.wide or not key else frame[list(key)]
        shown = shown.loc[:, [c for c in shown.columns if not shown[c].isna().all()]] if len(shown) else shown
        print(_fitted(shown, self.time_unit, headers) if not self.wide else text_table(shown, self.time_unit,
                                                                                      headers=headers))

    def finish(self, main: str | None = None) -> None:
        """Print the machine document: the ``main`` table as CSV (default the first; the headline values as one
        row when there is no table), or everything as JSON."""
        if self.format == "csv":
            frame = self.tables[main or next(iter(self.tables))] if self.tables else pd.DataFrame([self.values])
            print(frame.to_csv(index=False), end="")
        elif self.format == "json":
            document = dict(self.values)
            document.update({name: _records(frame) for name, frame in self.tables.items()})
            print(json.dumps(document, indent=1, default=_plain))


def _fitted(frame: pd.DataFrame, unit: str | None, headers: dict | None) -> str:
    """``frame`` as text within :data:`WIDTH` columns: while too wide, the widest text column's longest cells
    are cut, ending in ``…`` (``--wide`` shows them whole)."""
    text = text_table(frame, unit, headers=headers)
    over = max(map(len, text.splitlines()), default=0) - WIDTH
    texts = [name for name in frame.columns if frame[name].map(lambda value: isinstance(value, str)).all()]
    if over <= 0 or not texts or frame.empty:
        return text
    widest = max(texts, key=lambda name: frame[name].str.len().max())
    keep = max(frame[widest].str.len().max() - over, len(str((headers or {}).get(widest, widest))), 4)
    cut = frame[widest].map(lambda value: value if len(value) <= keep else value[:keep - 1] + "…")
    return text_table(frame.assign(**{widest: cut}), unit, headers=headers)


def _records(frame: pd.DataFrame) -> list[dict]:
    """A frame as JSON records: NaN as null, tuples as lists, numpy numbers as numbers."""
    return json.loads(frame.to_json(orient="records"))


def _plain(value):
    """numpy numbers and tuples in headline values, for ``json.dumps``."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, tuple | set):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON")
