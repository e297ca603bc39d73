"""The checks a layer table's rows pass: columns, option names, roles, counts and per-kind agreement.

:class:`~sappkit.layers.table.LayerTable` calls :func:`validated_rows` once on
the frame it is given, :func:`built_rows` on one sappkit built (the estimate's);
:meth:`~sappkit.layers.table.LayerTable.with_columns` checks only what it
replaces, in numpy (:func:`replaced_numbers`, :func:`check_kind_column`). Both
fall back to the full checks for their messages (docs/design.md "The layer
table").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .._check import short
from .._frames import check_frame, name_column, number_column, whole_column
from .._frames import plain as _plain
from ..columns import (
    BODY, COUNT, FIRST_WORKING_MB, KIND, LAYER_NUMERIC, LAYER_OPTIONAL, LAYER_REQUIRED, MODULE, OPTION, PARAM_MB,
    ROLE, ROLES, SPLIT_COLUMNS, TAIL, HEAD, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_LAYERS, MAX_MEMORY_MB, MAX_TIME
from .options import check_option_names

__all__ = ["validated_rows", "built_rows", "check_per_kind", "replaced_numbers", "check_kind_column"]

#: Columns that describe a kind, so they must agree across its option rows.
_PER_KIND = (ROLE, COUNT, PARAM_MB, MODULE)


def validated_rows(frame, custom: tuple[str, ...]) -> pd.DataFrame:
    """Check the layer columns, the option names (SAPP's or ``custom``) and per-kind consistency; return a clean
    copy with defaults filled."""
    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"layers must be a DataFrame; got {type(frame).__name__}")
    check_frame(frame, "layers", LAYER_REQUIRED, "a layer table")
    frame = frame.reset_index(drop=True).copy()
    # Optional columns may be absent or blank on some rows: both mean the default.
    for column, default in LAYER_OPTIONAL.items():
        values = frame[column] if column in frame.columns else pd.Series(None, index=frame.index, dtype=object)
        frame[column] = values.astype(object).fillna(frame[WORKING_MB] if column == FIRST_WORKING_MB else default)
    for column in (KIND, OPTION, MODULE):
        frame[column] = name_column(frame, column, "layers")

    def where(row: int) -> str:
        return f"layers row {row} (kind {frame.at[row, KIND]!r})"

    for column in LAYER_NUMERIC:
        values = number_column(frame, column, "layers", maximum=_limit(column), where=where)
        if column != COUNT:  # counts are checked whole below, against the values as given
            frame[column] = values
    # The split-backward columns stay absent unless given; a blank cell means the simulator's default split.
    for column in SPLIT_COLUMNS:
        if column in frame.columns:
            blank = frame[column].isna()
            frame[column] = number_column(frame.assign(**{column: frame[column].where(~blank, 0.0)}), column,
                                          "layers", maximum=_limit(column), where=where)
            frame.loc[blank, column] = np.nan
    for row, role in frame[ROLE].items():
        if role not in ROLES:
            raise InputError(f"{where(row)} column 'role' is {short(role)}; "
                             f"expected one of {', '.join(map(repr, ROLES))}")
    frame[COUNT] = whole_column(frame, COUNT, "layers", minimum=1, maximum=MAX_LAYERS, where=where)
    duplicated = frame.duplicated([KIND, OPTION])
    if duplicated.any():
        row = int(np.flatnonzero(duplicated)[0])
        raise InputError(f"layers row {row} repeats (kind, option) = "
                         f"({frame.at[row, KIND]!r}, {frame.at[row, OPTION]!r}); each pair may appear once")
    check_per_kind(frame)
    if not (frame[ROLE] == BODY).any():
        raise InputError("layers has no body kind; a pipeline needs at least one row with role 'body'")
    counts = frame[frame[ROLE] == BODY].drop_duplicates(KIND).set_index(KIND)[COUNT]
    if counts.sum() > MAX_LAYERS:
        raise InputError(f"layers has {counts.sum()} body layers "
                         f"({', '.join(f'{kind!r}: {n}' for kind, n in counts.items())}); "
                         f"expected at most {MAX_LAYERS.cited}")
    check_option_names(frame, custom, where)
    return frame


def built_rows(frame: pd.DataFrame, custom: tuple[str, ...]) -> pd.DataFrame:
    """:func:`validated_rows` of a frame sappkit built (an estimate's: every layer column, no split ones): the same
    clean copy, with what a formula can get wrong checked in numpy (a number not finite, negative or past its limit,
    a count not whole) and the names, roles and (kind, option) pairs in Python; the kinds' agreement and the roles'
    layout hold by construction. Any other frame, or one that fails a check, takes :func:`validated_rows`, which
    names the row."""
    columns = (*LAYER_REQUIRED, *LAYER_OPTIONAL)
    if not (len(frame.columns) == len(columns) and set(frame.columns) == set(columns)):
        return validated_rows(frame, custom)
    data = {c: frame[c].to_numpy() for c in frame.columns}  # each column read once; the copy is built in one go
    numbers = {c: data[c] for c in LAYER_NUMERIC if c in data}
    names = {c: data[c].tolist() for c in (KIND, OPTION, MODULE)}
    roles = set(data[ROLE].tolist())
    if not (all(values.dtype.kind in "fiu" for values in numbers.values())
            and all(_fine(values, column) for column, values in numbers.items())
            and all(isinstance(v, str) and v.strip() for values in names.values() for v in values)
            and roles <= set(ROLES) and BODY in roles
            and len(set(zip(names[KIND], names[OPTION]))) == len(frame)):
        return validated_rows(frame, custom)
    for column, values in names.items():
        data[column] = np.array(values, dtype=object)  # as name_column writes names
    for column, values in numbers.items():
        data[column] = values.astype(int if column == COUNT else float)
    built = pd.DataFrame(data)
    built.attrs = dict(frame.attrs)
    check_option_names(built, custom, lambda row: f"layers row {row} (kind {built.at[row, KIND]!r})")
    return built


def _fine(values: np.ndarray, column: str) -> bool:
    """Whether a numeric column's values pass :func:`validated_rows` (counts: whole, 1 to the layer limit)."""
    values = values.astype(float)
    with np.errstate(invalid="ignore"):
        if column == COUNT:
            return bool(((values >= 1) & (values <= MAX_LAYERS) & (values % 1 == 0)).all())
        return bool((np.isfinite(values) & (values >= 0) & (values <= _limit(column))).all())


def replaced_numbers(frame: pd.DataFrame, column: str, values) -> np.ndarray:
    """``values`` for the numeric ``column`` of a checked ``frame`` as floats, refused as :func:`validated_rows`
    refuses them: an array of numbers is checked with numpy (finite, >= 0, within the column's limit); anything
    else (a list may hold a bool, a Series aligns on its index), or a bad number, goes through the full check,
    which raises naming the row."""
    if isinstance(values, np.ndarray) and values.shape == (len(frame),) and values.dtype.kind in "fiu" \
            and _fine(values, column):
        return values.astype(float)
    frame = frame.copy()
    frame[column] = values
    return number_column(frame, column, "layers", maximum=_limit(column))


def check_kind_column(frame: pd.DataFrame, column: str) -> None:
    """Raise unless ``column`` is one value per kind (as :func:`check_per_kind` does, in numpy), on a frame whose
    other columns passed :func:`check_per_kind` already."""
    _, first, inverse = np.unique(frame[KIND].to_numpy(dtype=str), return_index=True, return_inverse=True)
    values = frame[column].to_numpy()
    if (values != values[first][inverse]).any():
        check_per_kind(frame)


def _limit(column: str):
    """The limit of a numeric layer column (none for counts)."""
    return MAX_MEMORY_MB if column.endswith("_mb") else MAX_TIME if column.endswith("_time") else None


def check_per_kind(frame: pd.DataFrame) -> None:
    for kind, rows in frame.groupby(KIND, sort=False):
        for column in _PER_KIND:
            values = rows[column].unique()
            if len(values) > 1:
                raise InputError(f"layers kind {kind!r} has different {column!r} on its rows "
                                 f"{rows.index.tolist()}: {[_plain(v) for v in values]}; "
                                 f"a kind's {column} is one value")
        role = rows[ROLE].iloc[0]
        if role in (HEAD, TAIL) and len(rows) > 1:
            raise InputError(f"layers {role} kind {kind!r} has {len(rows)} option rows "
                             f"({', '.join(rows[OPTION])}); a {role} has exactly one")
        if role in (HEAD, TAIL) and rows[COUNT].iloc[0] != 1:
            raise InputError(f"layers {role} kind {kind!r} has count {rows[COUNT].iloc[0]}; a {role} has count 1")
    for role in (HEAD, TAIL):
        kinds = frame.loc[frame[ROLE] == role, KIND].unique()
        if len(kinds) > 1:
            raise InputError(f"layers has {len(kinds)} {role} kinds ({', '.join(map(repr, kinds))}); "
                             f"at most one {role} is allowed")
