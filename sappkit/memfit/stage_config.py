"""What each stage of a MindFormers dry run holds: layers and per-option recompute counts.

MindFormers states a dry run with an ``offset`` (a stage holds ``num_layer //
pipeline_num + offset[s]`` layers) and three cumulative recompute counts per
stage: ``recompute`` counts full-recompute layers, ``select_recompute``
selective + both + full, ``select_comm_recompute`` comm + both + full. So
full = recompute, both = max(min(slct − full, comm − full), 0), selective =
max(slct − full − both, 0), comm = max(comm − full − both, 0), none = the
rest. Each is a per-stage list, a bool (``true``: every layer of the stage)
or ``0``. The counts apply positionally — a stage's first ``recompute``
layers run full, its first ``select_recompute`` layers selective, ... —
which yields exactly the counts above (and shows that one stage cannot run
both selective-only and comm-only layers), and says which layers run what
when the model has several body kinds placed in model order (``kinds``).
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np
import pandas as pd

from .._check import check_int, check_name, short
from ..columns import CHUNK, KIND, LAYERS, POSITIONAL_OPTIONS, SAPP_OPTIONS, STAGE
from ..errors import InputError
from ..limits import MAX_CHUNKS, MAX_LAYERS, MAX_STAGES
from ..pipeline.schedules import model_order

__all__ = ["RUN", "STAGES", "COUNT_PREFIX", "count_column", "per_option_counts", "dryrun_config"]

RUN = "run"
STAGES = "stages"
COUNT_PREFIX = "n_"


def count_column(option: str) -> str:
    """The observations column counting layers under ``option`` (``n_full``)."""
    return f"{COUNT_PREFIX}{option}"


def per_option_counts(layers, full, select, comm) -> dict[str, np.ndarray]:
    """Per-option layer counts from MindFormers' cumulative recompute counts (arrays of one shape).

    Examples
    --------
    >>> counts = per_option_counts([6, 6], full=[1, 0], select=[3, 2], comm=[2, 4])
    >>> {option: values.tolist() for option, values in counts.items()}
    {'none': [3, 2], 'selective': [1, 0], 'comm': [0, 2], 'both': [1, 2], 'full': [1, 0]}
    """
    layers, full, select, comm = (np.asarray(x, dtype=int) for x in (layers, full, select, comm))
    both = np.maximum(np.minimum(select - full, comm - full), 0)
    selective = np.maximum(select - full - both, 0)
    comm_only = np.maximum(comm - full - both, 0)
    none = layers - full - both - selective - comm_only
    return {"none": none, "selective": selective, "comm": comm_only, "both": both, "full": full}


def dryrun_config(*, stages, layers, offset=0, recompute=0, select_recompute=0, select_comm_recompute=0,
                  chunks=1, run="run1", kinds: Mapping[str, int] | None = None, where: str = "") -> pd.DataFrame:
    """What every stage of one MindFormers dry run holds: the observations frame without ``memory_mb``.

    Parameters
    ----------
    stages, layers : int
        ``pipeline_num`` and ``num_layer``.
    offset, recompute, select_recompute, select_comm_recompute
        As in the MindFormers YAML: ``0``, a bool (recompute keys: ``true`` is
        every layer) or a list per stage; with ``chunks > 1``, a list of lists
        per chunk (``Plan.offsets()``'s form). Cell (c, s) holds
        ``layers // (stages * chunks) + offset[c][s]`` layers.
    chunks : int
        Interleaved chunks ``v``; rows then carry ``chunk``.
    run : label
        The ``run`` column.
    kinds : mapping, optional
        Layers of each body kind in model order (adding up to ``layers``);
        rows then carry ``kind``, one per kind present on a cell.
    where : str
        Prefix for error messages (a file name).

    Examples
    --------
    >>> config = dryrun_config(stages=4, layers=8, offset=[1, 0, 0, -1], recompute=[2, 0, True, 0])
    >>> config[["stage", "layers", "n_none", "n_full"]].to_numpy().tolist()
    [[0, 3, 1, 2], [1, 2, 2, 0], [2, 2, 0, 2], [3, 1, 1, 0]]
    """
    prefix = f"{where}: " if where else ""
    p = check_int("stages", stages, minimum=2, maximum=MAX_STAGES, why="a pipeline needs at least two stages")
    total = check_int("layers", layers, minimum=1, maximum=MAX_LAYERS)
    v = check_int("chunks", chunks, minimum=1, maximum=MAX_CHUNKS)
    check_name("run", run)
    base = total // (p * v)
    held = base + _per_cell(prefix, "offset", offset, p, v, integers=True)
    for (c, s), n in np.ndenumerate(held):
        if n < 0:
            raise InputError(f"{prefix}offset{_cell(c, s, v)} gives {n} layers ({base} + offset); "
                             "a stage cannot hold fewer than 0 layers")
    if held.sum() != total:
        cells = f"{p} stages" if v == 1 else f"{p * v} cells ({p} stages x {v} chunks)"
        raise InputError(f"{prefix}offset sums to {int(held.sum() - base * p * v)}; with {total} layers on "
                         f"{cells}, {base} each, the offsets must sum to {total - base * p * v}")
    counts = {key: _per_cell(prefix, key, value, p, v, held=held)
              for key, value in (("recompute", recompute), ("select_recompute", select_recompute),
                                 ("select_comm_recompute", select_comm_recompute))}
    by_option = per_option_counts(held, counts["recompute"], counts["select_recompute"],
                                  counts["select_comm_recompute"])
    cells = model_order("interleaved" if v > 1 else "1f1b", p, v)
    rows = []
    for c, s in cells:
        cell = {RUN: run, STAGE: s, **({CHUNK: c} if v > 1 else {}), STAGES: p, LAYERS: int(held[c, s])}
        rows.append((cell, {option: int(by_option[option][c, s]) for option in SAPP_OPTIONS}))
    if kinds is not None:
        return _split_kinds(prefix, rows, kinds, total)
    return pd.DataFrame([{**cell, **{count_column(o): n for o, n in options.items()}} for cell, options in rows])


def _cell(c: int, s: int, v: int) -> str:
    return f" chunk {c} stage {s}" if v > 1 else f" stage {s}"


def _per_cell(prefix: str, key: str, value, p: int, v: int, *, held=None, integers=False) -> np.ndarray:
    """A MindFormers per-stage value as an int array [chunk, stage]; ``held`` bounds recompute counts."""
    if _is_zero_or_bool(value):
        if integers and isinstance(value, bool | np.bool_):
            raise InputError(f"{prefix}{key} is {value!r}; expected 0 or a list of ints per stage")
        return held.copy() if value is True else np.zeros((v, p), dtype=int)
    lists = value if v > 1 else [value]
    expected = f"a list of {v} lists of {p} values (one per chunk)" if v > 1 else f"a list of {p} values"
    if not isinstance(value, list) or len(lists) != v or any(not isinstance(x, list) or len(x) != p for x in lists):
        raise InputError(f"{prefix}{key} is {short(value)}; expected 0, a bool or {expected} "
                         f"({p} stages{f', {v} chunks' if v > 1 else ''})")
    out = np.zeros((v, p), dtype=int)
    for c, items in enumerate(lists):
        for s, item in enumerate(items):
            limit = None if held is None else int(held[c, s])
            out[c, s] = _cell_value(prefix, key, c, s, v, item, limit, integers)
    return out


def _cell_value(prefix, key, c, s, v, item, limit, integers) -> int:
    if isinstance(item, bool | np.bool_) and not integers:
        return limit if item else 0
    ok = isinstance(item, numbers.Integral) and not isinstance(item, bool | np.bool_)
    if integers and ok and abs(item) <= MAX_LAYERS:
        return int(item)
    if ok and not integers and 0 <= item <= limit:
        return int(item)
    if integers:
        expected = f"an int from -{MAX_LAYERS} to {MAX_LAYERS.cited}" if ok else "an int"
    else:
        expected = f"an int from 0 to {limit} (the layers there) or a bool"
    raise InputError(f"{prefix}{key}{_cell(c, s, v)} is {short(item)}; expected {expected}")


def _is_zero_or_bool(value) -> bool:
    if isinstance(value, bool | np.bool_):
        return True
    return isinstance(value, numbers.Integral) and value == 0


def _split_kinds(prefix: str, rows: list, kinds: Mapping[str, int], total: int) -> pd.DataFrame:
    """One row per (cell, kind): the cell's layers in model order, options by position in the cell."""
    if not isinstance(kinds, Mapping) or not kinds:
        raise InputError(f"{prefix}kinds must be a mapping of body kind to its layer count in model order; "
                         f"got {short(kinds)}")
    for kind, count in kinds.items():
        check_name("kinds key", kind)
        check_int(f"kinds[{kind!r}]", count, minimum=1, maximum=MAX_LAYERS)
    if sum(kinds.values()) != total:
        raise InputError(f"{prefix}kinds add up to {sum(kinds.values())} layers ({short(dict(kinds))}); "
                         f"expected layers = {total}")
    bounds = np.cumsum([0, *kinds.values()])
    out, start = [], 0
    for cell, options in rows:
        stops = np.cumsum([options[o] for o in POSITIONAL_OPTIONS])
        positions = range(start, start + cell[LAYERS])
        # An empty cell still gets a row (its stage's peak is observed), of the next kind in model order.
        empty_kind = min(int(np.searchsorted(bounds, start, side="right")) - 1, len(kinds) - 1)
        for k, kind in enumerate(kinds):
            mine = [j - start for j in positions if bounds[k] <= j < bounds[k + 1]]
            if not mine and not (cell[LAYERS] == 0 and k == empty_kind):
                continue
            per = {o: 0 for o in SAPP_OPTIONS}
            for j in mine:
                per[POSITIONAL_OPTIONS[int(np.searchsorted(stops, j, side="right"))]] += 1
            out.append({**cell, KIND: kind, LAYERS: len(mine), **{count_column(o): per[o] for o in SAPP_OPTIONS}})
        start += cell[LAYERS]
    frame = pd.DataFrame(out)
    head = [RUN, STAGE, *([CHUNK] if CHUNK in frame else []), KIND]
    return frame[head + [c for c in frame.columns if c not in head]]
