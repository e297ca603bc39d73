"""Event-level simulation of one training step of a pipeline schedule.

Each stage runs its ops in its schedule's order (:mod:`sappkit.pipeline.orders`); an
op starts when its stage is free and its input is ready:

- the forward of (unit, cell) after the forward of the same unit on the cell
  before it in model order (plus ``p2p_time`` when that cell is on another
  stage);
- the backward after the backward of the same unit on the cell after it, or,
  on the model's last cell, after its own forward.

The step time is the last op's end. Memory: a stage holds its static memory
throughout; a forward adds its cell's ``activation_mb`` when it **starts** and
the backward of the same unit releases it when it **ends**.

How the measured counts relate to :func:`sappkit.in_flight` (tested in
``tests/test_simulate.py``):

- ``1f1b``, ``dualpipev`` and one-chunk ``seqpipe``: each cell's peak equals
  ``in_flight``.
- ``interleaved`` (both variants) with ``m`` a multiple of ``p``: when the
  stage's steady state starts, each cell holds exactly ``in_flight`` and the
  stage holds their sum, which stays its peak. In the steady state the stage
  releases last-chunk activations while adding first-chunk ones, so a cell's
  own peak can exceed ``in_flight`` (up to ``min(2p, m)``); with unequal chunks
  this shift is the balancer's interleaved overhead, and for two chunks the
  measured peak equals static + Σ activation × in_flight + the seed's overhead.
  When ``m mod p = r > 0`` the first group is ``p + r`` long and a stage holds
  ``(v - 1) r`` more micro-batches than ``in_flight`` sums to.
- ``seqpipe`` with chunks: a stage's total peak is the sum of ``in_flight``
  plus ``(v - 1)(g + m k mod g - p)`` with ``g = k ceil(p / k)``; the seed
  spreads that total over the chunks differently from this order.

For ``seqpipe`` the costs are per slice (a layer table rescaled by
:func:`sappkit.pipeline.seqpipe.rescale_for_seqpipe`, DESIGN.md "SeqPipe") and the step
runs ``m k`` slices; a slice's backward follows the later slices' of its
micro-batch. DualPipeV runs each backward as one block (the open-source schedule
splits the backward into input- and weight-gradient passes to fill bubbles;
that split needs per-layer costs the layer table does not carry).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._check import check_number, short
from .._frames import check_frame, number_column, plain, whole_column
from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, CHUNK, CONST_MB, FORWARD_TIME, IN_FLIGHT, LIMIT_MB, MEMORY_MB, MEMORY_ONCE_MB,
    OVERHEAD_MB, PARAM_MB, RECOMPUTE_TIME, STAGE, TIME, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_CHUNKS, MAX_MEMORY_MB, MAX_STAGES, MAX_TIME
from .events import StepPlan, op_starts, step_plan
from .orders import BACKWARD, FORWARD
from .schedules import check_pipeline, check_simulated

__all__ = ["Simulation", "simulate", "STATIC_MB", "MICRO_BATCH", "SLICE", "PHASE", "START", "END",
           "BUSY_TIME", "IDLE_TIME", "PHASES"]

STATIC_MB = "static_mb"
MICRO_BATCH = "micro_batch"
SLICE = "slice"
PHASE = "phase"
START = "start"
END = "end"
BUSY_TIME = "busy_time"
IDLE_TIME = "idle_time"
PHASES = ("forward", "backward")

_COST_REQUIRED = (STAGE, CHUNK, FORWARD_TIME, BACKWARD_TIME, ACTIVATION_MB)
_COST_NUMERIC = (FORWARD_TIME, BACKWARD_TIME, RECOMPUTE_TIME, ACTIVATION_MB, STATIC_MB, PARAM_MB,
                 MEMORY_ONCE_MB)


@dataclass(frozen=True, eq=False)
class Simulation:
    """One simulated training step.

    Attributes
    ----------
    schedule, micro_batches, chunks, seq_split, less_memory
        The pipeline that ran.
    step_time : float
        When the last op ends (time unit of the costs).
    bubbles : Series
        ``real``, ``ideal``, ``imbalance``, ``recompute``: idle and recompute
        time as fractions of the compute without recompute, ``real = ideal +
        imbalance + recompute``; ``ideal = (p - 1) / (v m k)`` (``k`` slices per
        micro-batch for ``seqpipe``, else 1). ``imbalance`` is the rest:
        unequal cells, ``p2p_time`` and waits the order adds (negative when a
        schedule beats the ideal, as DualPipeV can).
    timeline : DataFrame
        One row per op: ``stage``, ``chunk``, ``micro_batch``, ``slice``,
        ``phase`` ("forward"/"backward"), ``start``, ``end``, ``recompute_time``
        (the recompute at the start of a backward).
    memory : DataFrame
        ``stage``, ``time``, ``memory_mb``: each stage's memory from time 0 and
        after every change (a step function: hold each value until the next;
        of changes at one time only the result is listed, while the stage's
        peak counts every moment).
    stages : DataFrame
        The shared per-stage memory schema, measured: ``param_mb`` (the costs'
        ``param_mb``), ``activation_mb`` (peak activations + ``memory_once_mb``),
        ``overhead_mb`` and ``working_mb`` (0), ``const_mb`` (the rest of the
        static memory), ``memory_mb`` (the peak), ``limit_mb``; plus
        ``busy_time`` and ``idle_time``.
    in_flight : DataFrame
        ``stage``, ``chunk``, ``in_flight``: the most units each cell held at
        once, in :func:`sappkit.in_flight`'s row order.
    """

    schedule: str
    micro_batches: int
    chunks: int
    seq_split: int
    less_memory: bool
    step_time: float
    bubbles: pd.Series = field(repr=False)
    timeline: pd.DataFrame = field(repr=False)
    memory: pd.DataFrame = field(repr=False)
    stages: pd.DataFrame = field(repr=False)
    in_flight: pd.DataFrame = field(repr=False)

    def describe(self) -> str:
        """A few lines: the pipeline, step time, bubble split and the highest stage peak."""
        b = self.bubbles
        peak = self.stages.loc[self.stages[MEMORY_MB].idxmax()]
        return "\n".join([
            f"{self.schedule}: {len(self.stages)} stages, {self.chunks} chunk(s), "
            f"{self.micro_batches} micro-batches" + (f" x {self.seq_split} slices" if self.seq_split > 1 else ""),
            f"step time {self.step_time:.6g}",
            f"bubble {b['real']:.4f} = ideal {b['ideal']:.4f} + imbalance {b['imbalance']:.4f} "
            f"+ recompute {b['recompute']:.4f}",
            f"peak memory {peak[MEMORY_MB]:.1f} MB on stage {int(peak[STAGE])}",
        ])


def simulate(costs: pd.DataFrame, *, schedule: str = "1f1b", micro_batches: int, less_memory: bool = False,
             seq_split: int = 1, static_mb=None, p2p_time: float = 0.0, limit_mb: float | None = None) -> Simulation:
    """Simulate one training step of ``schedule`` over per-cell costs.

    Parameters
    ----------
    costs : DataFrame
        One row per cell (chunk, stage), every cell of a ``p`` x ``v`` grid:
        ``stage``, ``chunk``, ``forward_time``, ``backward_time`` (recompute
        included), ``activation_mb`` (per micro-batch in flight; per slice for
        ``seqpipe``); optional ``recompute_time`` (the part of the backward
        that is recompute; default 0), ``static_mb`` (summed per stage),
        ``param_mb`` and ``memory_once_mb`` (the parts of ``static_mb``
        reported under those names; :func:`sappkit.cell_costs` writes them all).
    schedule : {"1f1b", "interleaved", "dualpipev", "seqpipe"}
    micro_batches : int
    less_memory : bool
        Less-memory interleaved order (``interleaved`` and ``seqpipe``).
    seq_split : int
        SeqPipe's slices per micro-batch ``k``; the costs are then per slice.
    static_mb : float, sequence or Series, optional
        Static memory per stage (one number for all, or ``p`` of them; a
        Series indexed by stage), instead of a ``static_mb`` column.
    p2p_time : float
        Added to every dependency between two stages.
    limit_mb : float, optional
        Device memory, copied into ``stages.limit_mb``.

    Returns
    -------
    Simulation

    Examples
    --------
    >>> costs = pd.DataFrame(dict(stage=[0, 1, 2, 3], chunk=0, forward_time=1.0,
    ...                           backward_time=2.0, activation_mb=10.0))
    >>> sim = simulate(costs, schedule="1f1b", micro_batches=8, static_mb=100)
    >>> sim.step_time, sim.stages["memory_mb"].tolist()
    (33.0, [140.0, 130.0, 120.0, 110.0])
    >>> sim.bubbles.round(4).to_dict()
    {'real': 0.375, 'ideal': 0.375, 'imbalance': 0.0, 'recompute': 0.0}
    """
    cost, p, v = _checked_costs(costs)
    schedule, p, m, v, k = check_pipeline(schedule, p, micro_batches, v, less_memory, seq_split)
    check_simulated(p, m, v, k)
    p2p_time = check_number("p2p_time", p2p_time, minimum=0, maximum=MAX_TIME)
    limit = np.nan if limit_mb is None else check_number("limit_mb", limit_mb, minimum=0, strict=True,
                                                         maximum=MAX_MEMORY_MB)
    static = _static_per_stage(cost, static_mb, p)
    param, once, const = _static_parts(cost, static)
    plan = step_plan(schedule, p, m, v, k, less_memory)

    # Cell values in model order: position i is plan.cells[i].
    in_model_order = [chunk * p + stage for chunk, stage in plan.cells]
    forward, backward, recompute, activation = (
        cost[column][in_model_order] for column in (FORWARD_TIME, BACKWARD_TIME, RECOMPUTE_TIME, ACTIVATION_MB))
    durations = np.concatenate([forward, backward])

    start = np.array(op_starts(plan, durations.tolist(), p2p_time, p))
    is_forward = plan.phase == FORWARD
    end = start + durations[plan.phase * plan.cell_count + plan.position]
    step_time = float(end.max())

    ops_per_stage = 2 * v * m * k
    held = np.where(is_forward, activation[plan.position], -activation[plan.position])
    held = held.reshape(p, ops_per_stage).cumsum(axis=1)
    event_time = np.where(is_forward, start, end).reshape(p, ops_per_stage)
    peak_activation = np.maximum(held.max(axis=1), 0.0)

    busy = (end - start).reshape(p, ops_per_stage).sum(axis=1)
    compute = float((forward + backward - recompute).sum()) * m * k
    real = p * step_time / compute - 1
    recompute_share = float(recompute.sum()) * m * k / compute
    ideal = (p - 1) / (v * m * k)
    bubbles = pd.Series({"real": real, "ideal": ideal, "imbalance": real - ideal - recompute_share,
                         "recompute": recompute_share})

    return Simulation(
        schedule=schedule, micro_batches=m, chunks=v, seq_split=k, less_memory=bool(less_memory),
        step_time=step_time, bubbles=bubbles,
        timeline=_timeline(plan, start, end, recompute, k),
        memory=_memory(static, event_time, held),
        stages=_stage_frame(param, once, const, peak_activation, limit, busy, step_time),
        in_flight=_in_flight(plan, is_forward, v, p),
    )


def _checked_costs(costs) -> tuple[dict[str, np.ndarray], int, int]:
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
    over = np.flatnonzero(values[RECOMPUTE_TIME] > values[BACKWARD_TIME])
    if over.size:
        row = int(over[0])
        raise InputError(f"costs row {row} has recompute_time {plain(values[RECOMPUTE_TIME][row])!r} above its "
                         f"backward_time {plain(values[BACKWARD_TIME][row])!r}; the recompute is part of the backward")
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


def _static_per_stage(cost: dict[str, np.ndarray], static_mb, p: int) -> np.ndarray:
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


def _timeline(plan: StepPlan, start, end, recompute, k: int) -> pd.DataFrame:
    cells = np.array(plan.cells)
    is_backward = plan.phase == BACKWARD
    return pd.DataFrame({
        STAGE: cells[plan.position, 1],
        CHUNK: cells[plan.position, 0],
        MICRO_BATCH: plan.unit // k,
        SLICE: plan.unit % k,
        PHASE: np.array(PHASES)[plan.phase],
        START: start,
        END: end,
        RECOMPUTE_TIME: np.where(is_backward, recompute[plan.position], 0.0),
    })


def _memory(static: np.ndarray, event_time: np.ndarray, held: np.ndarray) -> pd.DataFrame:
    """Each stage's memory from time 0 and after each change; of changes at one time, only the result."""
    p = len(static)
    time = np.hstack([np.zeros((p, 1)), event_time])
    value = static[:, None] + np.hstack([np.zeros((p, 1)), held])
    last_at_time = np.ones(time.shape, dtype=bool)
    last_at_time[:, :-1] = time[:, 1:] != time[:, :-1]
    return pd.DataFrame({
        STAGE: np.broadcast_to(np.arange(p)[:, None], time.shape)[last_at_time],
        TIME: time[last_at_time],
        MEMORY_MB: value[last_at_time],
    })


def _static_parts(cost: dict[str, np.ndarray], static: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def _stage_frame(param, once, const, peak_activation, limit, busy, step_time) -> pd.DataFrame:
    p = len(param)
    return pd.DataFrame({
        STAGE: np.arange(p),
        PARAM_MB: param,
        ACTIVATION_MB: peak_activation + once,
        OVERHEAD_MB: 0.0,
        WORKING_MB: 0.0,
        CONST_MB: const,
        MEMORY_MB: param + once + const + peak_activation,
        LIMIT_MB: limit,
        BUSY_TIME: busy,
        IDLE_TIME: step_time - busy,
    })


def _in_flight(plan: StepPlan, is_forward: np.ndarray, v: int, p: int) -> pd.DataFrame:
    """Peak units held per cell: count up at each forward, down at each backward, in run order."""
    by_cell = np.argsort(plan.position, kind="stable")
    counts = np.where(is_forward, 1, -1)[by_cell].reshape(plan.cell_count, -1).cumsum(axis=1).max(axis=1)
    peaks = np.zeros((v, p), dtype=int)
    for i, (chunk, stage) in enumerate(plan.cells):
        peaks[chunk, stage] = counts[i]
    return pd.DataFrame({STAGE: np.tile(np.arange(p), v), CHUNK: np.repeat(np.arange(v), p),
                         IN_FLIGHT: peaks.ravel()})
