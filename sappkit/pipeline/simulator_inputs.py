"""The simulator's inputs, checked: the per-cell costs frame, each stage's static memory and its parts, and
step orders given by hand (:func:`sappkit.pipeline.simulator.simulate`'s ``costs``, ``static_mb`` and
``orders``)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .._check import check_number, short
from .._frames import check_frame, number_column, plain, whole_column
from ..columns import (
    ACTIVATION_MB, BACKWARD_INPUT_TIME, BACKWARD_TIME, BACKWARD_WEIGHT_TIME, CHUNK, FORWARD_TIME, MEMORY_ONCE_MB,
    PARAM_MB, RECOMPUTE_TIME, STAGE, WEIGHT_PASS_MB, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_CHUNKS, MAX_MEMORY_MB, MAX_STAGES, MAX_TIME
from .phases import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD

__all__ = ["STATIC_MB", "checked_costs", "static_per_stage", "static_parts", "checked_orders"]

STATIC_MB = "static_mb"
#: Op phases a hand-given order may use.
PHASE_CODES = (FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT)
_COST_REQUIRED = (STAGE, CHUNK, FORWARD_TIME, BACKWARD_TIME, ACTIVATION_MB)
_COST_NUMERIC = (FORWARD_TIME, BACKWARD_TIME, RECOMPUTE_TIME, ACTIVATION_MB, STATIC_MB, PARAM_MB,
                 MEMORY_ONCE_MB, WORKING_MB, BACKWARD_INPUT_TIME, BACKWARD_WEIGHT_TIME, WEIGHT_PASS_MB)


def checked_costs(costs) -> tuple[dict[str, np.ndarray], int, int]:
    """Validate the costs frame; return its columns as arrays indexed ``chunk * p + stage``, ``p`` and ``v``."""
    check_frame(costs, "costs", _COST_REQUIRED, "a costs frame")
    if costs.empty:
        raise InputError("costs has no rows; it needs one row per (chunk, stage) cell")
    costs = costs.reset_index(drop=True)
    stage, chunk = (whole_column(costs, column, "costs", maximum=limit)
                    for column, limit in ((STAGE, MAX_STAGES), (CHUNK, MAX_CHUNKS)))
    values = {column: number_column(costs, column, "costs",
                                    maximum=MAX_MEMORY_MB if column.endswith("_mb") else MAX_TIME)
              for column in _COST_NUMERIC if column in costs.columns}
    values.setdefault(RECOMPUTE_TIME, np.zeros(len(costs)))
    values.setdefault(BACKWARD_WEIGHT_TIME, (values[BACKWARD_TIME] - values[RECOMPUTE_TIME]) / 2)
    values.setdefault(BACKWARD_INPUT_TIME, values[BACKWARD_TIME] - values[BACKWARD_WEIGHT_TIME])
    values.setdefault(WEIGHT_PASS_MB, values[ACTIVATION_MB])
    for part, whole, why in ((RECOMPUTE_TIME, BACKWARD_TIME, "the recompute is part of the backward"),
                             (RECOMPUTE_TIME, BACKWARD_INPUT_TIME, "the recompute runs in the input pass"),
                             (WEIGHT_PASS_MB, ACTIVATION_MB, "the weight pass keeps part of the activation")):
        over = np.flatnonzero(values[part] > values[whole])
        if over.size:
            row = int(over[0])
            raise InputError(f"costs row {row} has {part} {plain(values[part][row])!r} above its {whole} "
                             f"{plain(values[whole][row])!r}; {why}")
    p, v = int(stage.max()) + 1, int(chunk.max()) + 1
    cell = chunk * p + stage
    seen = np.zeros(p * v, dtype=bool)
    for row, index in enumerate(cell.tolist()):
        if seen[index]:
            raise InputError(f"costs row {row} repeats cell (chunk, stage) = ({chunk[row]}, {stage[row]}); "
                             "each cell has one row")
        seen[index] = True
    if not seen.all():
        index = int(np.flatnonzero(~seen)[0])
        raise InputError(f"costs has no row for cell (chunk, stage) = ({index // p}, {index % p}); "
                         f"stages 0..{p - 1} and chunks 0..{v - 1} need a row each")
    if not (values[FORWARD_TIME] + values[BACKWARD_TIME] - values[RECOMPUTE_TIME]).sum() > 0:
        raise InputError("costs has no compute time: forward_time + backward_time - recompute_time "
                         "sums to 0 over the cells")
    by_cell = np.empty(p * v, dtype=int)
    by_cell[cell] = np.arange(p * v)
    return {column: array[by_cell] for column, array in values.items()}, p, v


def _per_stage(cost: dict[str, np.ndarray], column: str, p: int) -> np.ndarray:
    """A cost column summed over each stage's chunks (zeros when the column is absent)."""
    if column not in cost:
        return np.zeros(p)
    return cost[column].reshape(-1, p).sum(axis=0)


def static_per_stage(cost: dict[str, np.ndarray], static_mb, p: int) -> np.ndarray:
    """Static memory per stage from the keyword or the ``static_mb`` column."""
    if static_mb is None:
        return _per_stage(cost, STATIC_MB, p)
    if STATIC_MB in cost:
        raise InputError("static_mb is given both as an argument and as a costs column; give one")
    if isinstance(static_mb, pd.Series):
        if sorted(static_mb.index.tolist()) != list(range(p)):
            raise InputError(f"static_mb must be indexed by stages 0..{p - 1}; "
                             f"got index {short(static_mb.index.tolist())}")
        static_mb = static_mb.sort_index().tolist()
    values = np.atleast_1d(np.asarray(static_mb, dtype=object))
    if values.ndim != 1 or len(values) not in (1, p):
        raise InputError(f"static_mb must be one number or {p} (one per stage); got {short(static_mb)}")
    numbers = [check_number(f"static_mb[{s}]" if len(values) > 1 else "static_mb", x, minimum=0, maximum=MAX_MEMORY_MB)
               for s, x in enumerate(values)]
    return np.broadcast_to(np.array(numbers), (p,)).copy()


def static_parts(cost: dict[str, np.ndarray], static: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split each stage's static memory into ``param_mb``, ``memory_once_mb`` and the rest (``const_mb``)."""
    p = len(static)
    param, once = _per_stage(cost, PARAM_MB, p), _per_stage(cost, MEMORY_ONCE_MB, p)
    const = static - param - once
    short = np.flatnonzero(const < -1e-9 * np.maximum(1.0, static))
    if short.size:
        s = int(short[0])
        raise InputError(f"static memory of stage {s} ({static[s]:g} MB) is less than its param_mb + "
                         f"memory_once_mb ({param[s] + once[s]:g} MB); static_mb includes both")
    return param, once, np.maximum(const, 0.0)


def checked_orders(orders, p: int, v: int) -> tuple:
    """``orders`` as a tuple per stage of ``(phase, chunk, unit)`` tuples, or raise naming the bad entry."""
    if isinstance(orders, (str, bytes)) or not hasattr(orders, "__len__") or len(orders) != p:
        raise InputError(f"orders must hold one sequence of ops per stage ({p}); got {orders!r:.80}")
    checked = []
    for s, ops in enumerate(orders):
        stage_ops = []
        for index, op in enumerate(ops):
            ok = isinstance(op, tuple) and len(op) == 3 and all(isinstance(x, (int, np.integer)) for x in op)
            if not ok or op[0] not in PHASE_CODES or op[1] not in range(v) or op[2] < 0:
                raise InputError(f"orders[{s}][{index}] must be (phase, chunk, unit) with phase in 0..3, chunk in "
                                 f"0..{v - 1} and unit >= 0; got {op!r}")
            stage_ops.append(tuple(int(x) for x in op))
        checked.append(tuple(stage_ops))
    return tuple(checked)
