"""Evaluate a placement: per-stage memory and time, and the ``sapp`` objective, in closed form.

A *placement* is an int array ``counts[item, chunk, stage]``: body layers of
each (kind, option) item of a :class:`~sappkit.balancer.setup.BalanceSetup`
on each cell. Everything a :class:`~sappkit.Plan` reports is computed here
from the placement alone, never read back from solver variables, so a plan
from the ILP, from the exact search or from MindFormers offsets is judged
the same way.

Time (docs/design.md "Time and the objectives"): ``F(c, s)`` and ``B(c, s)`` sum the
forward and backward (recompute included) of the cell's body layers plus the
head or tail on their cell. The stage's ``time`` is sappkit's one stage time,
``Σ_c F(c, s) + Σ_c B(c, s)``: what the stage computes per micro-batch (per
slice under SeqPipe), ``busy_time / (m k)`` in the simulator's stage frame.
The ``sapp`` objective prices each stage by SAPP's *stage term*
``max_c F(c, s) + max_c B(c, s)`` instead (the same for one chunk).

Memory (docs/design.md "One memory model"): parameters, activation × in-flight
(+ memory kept once) and the constant; by default (``working_set=True``) the
peak over the stage's memory events, working set included, which is what the
simulator measures (:mod:`sappkit.balancer.peaks`); with
``working_set=False`` SAPP's pipeline balancer's terms: the interleaved overhead
``max(0, ceil(Σ factor ΔA))`` over the *body* activations of the stage's
chunks and no working set (:func:`stage_memory`).

Objective ``sapp`` (SAPP's pipeline balancer's, every level and case):

- levels 0 and 1, ``bottleneck_split`` off: ``T = max_s`` stage term;
- ``bottleneck_split`` (level >= 1, ``v > 1``, ``m = p``):
  ``S = max_{s, c < v-1} B(c, s)``,
  ``L = max_s B(v-1, s) + Fht(v-1, s) + f_s / m * Fbody(v-1, s)``
  (``Fht`` the head/tail forward on the cell, ``f_s`` the forward-in-backward
  factors); level 1 minimises ``S + max(L, S)``, level >= 2 uses
  ``max(S, L)`` as its stage term;
- level >= 2 (approach A): ``(total + Σ chunks + Σ prev + next) / max(1, v-2)
  + stage term * (m - 2)`` with SAPP's bubble terms at their least
  feasible values (see :func:`_approach_a`).

Objective ``step`` is the simulated step time, which no closed form gives:
:mod:`sappkit.balancer.step.steptime` computes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, CHUNK, CONST_MB, FORWARD_TIME, KIND, LAYERS, LIMIT_MB, MEMORY_MB, OPTION, OVERHEAD_MB,
    PARAM_MB, RECOMPUTE_TIME, STAGE, TIME, WORKING_MB,
)
from ..errors import InputError
from ..pipeline.schedules import TWO_DIRECTIONS
from . import peaks
from .setup import BalanceSetup

__all__ = ["Evaluation", "StageMemory", "evaluate", "stage_memory", "placement_memory", "ceiling", "assignment_frame",
           "counts_from_assignment", "STAGE_COLUMNS", "OVERHEAD_TOLERANCE"]

#: Columns of a plan's ``stages`` frame: the shared memory schema, then layers and times.
STAGE_COLUMNS = (STAGE, LAYERS, PARAM_MB, ACTIVATION_MB, OVERHEAD_MB, WORKING_MB, CONST_MB, MEMORY_MB,
                 LIMIT_MB, FORWARD_TIME, BACKWARD_TIME, RECOMPUTE_TIME, TIME)
#: The overhead is an integer >= a float expression; this much above an integer still rounds down,
#: as the solvers' integrality tolerance allows.
OVERHEAD_TOLERANCE = 1e-6


def ceiling(limit_mb):
    """The most a stage may hold under ``limit_mb`` (a number or an array): the limit with the float-rounding
    tolerance every fit check allows."""
    return limit_mb * (1 + 1e-9) + 1e-6


@dataclass(frozen=True)
class Evaluation:
    """A placement's per-stage frame and objective values."""

    stages: pd.DataFrame
    forward: np.ndarray
    """``F(c, s)``, head and tail included."""
    backward: np.ndarray
    """``B(c, s)``, head and tail included."""
    sapp: float

    @property
    def fits(self) -> bool:
        """Every stage within the limit (up to float rounding)."""
        memory = self.stages[MEMORY_MB].to_numpy()
        return bool(np.all(memory <= ceiling(self.stages[LIMIT_MB].to_numpy())))


def _cell_sums(counts: np.ndarray, per_item: np.ndarray) -> np.ndarray:
    return np.tensordot(per_item, counts, axes=(0, 0))


@dataclass(frozen=True)
class StageMemory:
    """Memory of stages by term (arrays of one shape), as the shared schema splits it."""

    param: np.ndarray
    activation: np.ndarray
    overhead: np.ndarray
    working: np.ndarray
    const: float

    @property
    def total(self) -> np.ndarray:
        return self.param + self.activation + self.overhead + self.working + self.const


def stage_memory(setup: BalanceSetup, contents: np.ndarray, stages: np.ndarray) -> StageMemory:
    """Memory of stages ``stages`` (any shape) holding ``contents`` (that shape + ``[item, chunk]`` layers).

    Parameters, activation × in-flight (+ memory kept once), head and tail
    where they sit, and the constant; then with ``setup.working_set`` the
    peak over the stage's memory events (:mod:`sappkit.balancer.peaks`): the
    working set its backward then holds in ``working``, the rest of the peak
    above activation × in-flight in ``overhead`` (negative where no event
    holds every cell's in-flight count at once); without it SAPP's
    interleaved overhead ``max(0, ceil(Σ factor ΔA))`` over the body
    activations of the stage's chunks. Vectorised: the search prices many
    stages at once.
    """
    contents = np.asarray(contents, dtype=float)
    stages = np.asarray(stages)
    per_item = contents.sum(axis=-1)
    body_activation = contents.swapaxes(-1, -2) @ setup.activation
    flight = np.moveaxis(setup.in_flight[:, stages], 0, -1)
    fixed_param, fixed_activation = setup.fixed_stage_memory
    activation = (flight * body_activation).sum(axis=-1) + per_item @ setup.once + fixed_activation[stages]
    overhead = np.zeros(np.broadcast_shapes(stages.shape, activation.shape))
    working = np.zeros_like(overhead)
    if setup.working_set:
        overhead, working = _event_peak(setup, body_activation, contents, stages)
    elif setup.overhead_active:
        expr = (np.moveaxis(setup.overhead_weight_table[:, stages], 0, -1) * body_activation).sum(axis=-1)
        overhead = np.maximum(0.0, np.ceil(expr - OVERHEAD_TOLERANCE))
    return StageMemory(param=per_item @ setup.param + fixed_param[stages], activation=activation,
                       overhead=overhead, working=working, const=setup.const_mb)


def placement_memory(setup: BalanceSetup, counts: np.ndarray) -> np.ndarray:
    """``[n, stage]``: every stage's memory (:func:`stage_memory`) of placements ``[n, item, chunk, stage]``."""
    return stage_memory(setup, np.moveaxis(counts, -1, 1), np.arange(setup.stages)[None, :]).total


def _event_peak(setup: BalanceSetup, body_activation: np.ndarray, contents: np.ndarray,
                stages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(overhead, working) of the stages' peak event: the peak's part above activation × in-flight, and the
    working set held then."""
    shape = np.broadcast_shapes(stages.shape, body_activation.shape[:-1])
    stages = np.broadcast_to(stages, shape)
    cells = np.broadcast_to(body_activation, (*shape, setup.chunks)) + np.moveaxis(
        setup.fixed_cell_activation[:, stages], 0, -1)
    working_cells = np.broadcast_to(peaks.cell_working(setup, contents, stages), cells.shape)
    tables = peaks.event_table(setup)  # held and the one-hot running cell, [stage, event, chunk]
    if shape[-1:] != (setup.stages,) or (stages != np.arange(setup.stages)).any():
        tables = tuple(table[stages] for table in tables)  # else every stage in order: broadcast, no copy
    held, charged = ((table @ per_cell[..., None])[..., 0] for table, per_cell in zip(tables, (cells, working_cells)))
    values = held + charged
    top = values.argmax(axis=-1)[..., None]
    working = np.take_along_axis(charged, top, axis=-1)[..., 0]
    flight = np.moveaxis(setup.in_flight[:, stages], 0, -1)
    overhead = np.take_along_axis(values, top, axis=-1)[..., 0] - working - (cells * flight).sum(axis=-1)
    return overhead, working


def evaluate(setup: BalanceSetup, counts: np.ndarray) -> Evaluation:
    """Per-stage memory and time of ``counts`` and its ``sapp`` objective.

    Examples
    --------
    >>> from sappkit.balancer.setup import make_setup
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1,
    ...              backward_time=bt, activation_mb=a) for o, bt, a in (("none", 2, 50), ("full", 3, 5))]
    >>> setup = make_setup(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000)
    >>> result = evaluate(setup, np.array([[[0, 2]], [[2, 0]]]))
    >>> result.stages["memory_mb"].tolist(), result.sapp
    ([270.0, 350.0], 8.0)
    """
    counts = np.asarray(counts, dtype=float)
    forward = _cell_sums(counts, setup.forward) + setup.fixed_forward
    backward = _cell_sums(counts, setup.backward) + setup.fixed_backward
    memory = stage_memory(setup, np.moveaxis(counts, -1, 0), np.arange(setup.stages))
    stages = pd.DataFrame({
        STAGE: np.arange(setup.stages),
        LAYERS: counts.sum(axis=(0, 1)).astype(int),
        PARAM_MB: memory.param, ACTIVATION_MB: memory.activation, OVERHEAD_MB: memory.overhead,
        WORKING_MB: memory.working, CONST_MB: setup.const_mb, MEMORY_MB: memory.total, LIMIT_MB: setup.memory_mb,
        FORWARD_TIME: forward.sum(axis=0), BACKWARD_TIME: backward.sum(axis=0),
        RECOMPUTE_TIME: _cell_sums(counts, setup.recompute).sum(axis=0),
        TIME: forward.sum(axis=0) + backward.sum(axis=0),
    })
    body_forward = forward - setup.fixed_forward
    return Evaluation(stages=stages, forward=forward, backward=backward,
                      sapp=sapp_objective(setup, forward, backward, body_forward))


def split_terms(setup: BalanceSetup, backward: np.ndarray, body_forward: np.ndarray) -> tuple[float, float]:
    """``(S, L)`` of the ``bottleneck_split`` objective: non-last chunks' and the last chunk's bound."""
    v = setup.chunks
    first = float(backward[: v - 1].max(initial=0.0))
    fixed_last = setup.fixed_forward[v - 1]
    last = backward[v - 1] + fixed_last + setup.last_chunk_factors / setup.slices * body_forward[v - 1]
    return max(first, 0.0), float(last.max())


def stage_term(setup: BalanceSetup, forward: np.ndarray, backward: np.ndarray, body_forward: np.ndarray) -> float:
    """The stage term: SAPP's ``max_c F + max_c B``, or for ``bottleneck_split`` the level's combination of S
    and L."""
    if not setup.bottleneck_split:
        return float((forward.max(axis=0) + backward.max(axis=0)).max())
    first, last = split_terms(setup, backward, body_forward)
    return max(first, last) if setup.level >= 2 else first + max(first, last)


def sapp_objective(setup: BalanceSetup, forward: np.ndarray, backward: np.ndarray,
                   body_forward: np.ndarray) -> float:
    """SAPP's pipeline balancer's objective for this placement at ``setup.level`` (module docstring)."""
    term = stage_term(setup, forward, backward, body_forward)
    if setup.level < 2:
        return term
    return _approach_a(setup, forward, backward, body_forward) / max(1, setup.chunks - 2) + term * (setup.slices - 2)


def _approach_a(setup: BalanceSetup, forward: np.ndarray, backward: np.ndarray, body_forward: np.ndarray) -> float:
    """``total + Σ chunks_sum + Σ prev_diff + next_diff`` at their least feasible values (SAPP's pipeline balancer).

    ``total`` sums body work; ``chunks_sum[c] = (v - c)/v * Σ_s (F + B)(c, s) / p``
    for non-last chunks; ``prev_diff[c] = m Σ_{s>=1} max(0, R(s-1) - F(c, s))``
    with ``R`` the running maximum of ``F(c, 0) - head forward, F(c, 1), ...``
    (at least 0); ``next_diff = m Σ_{s<p-1} max(0, Q(s+1) - F(v-1, s))`` with
    ``Q`` the running maximum of the last chunk's forwards from the last stage back.
    """
    v, p, m = setup.chunks, setup.stages, setup.slices
    body_backward = backward - setup.fixed_backward
    total = float((body_forward + body_backward).sum())
    head_forward = setup.head.forward_time if setup.head is not None else 0.0
    chunks_sum = prev_diff = 0.0
    for c in range(v - 1):
        chunks_sum += (v - c) / v * float((forward[c] + backward[c]).sum()) / p
        running = max(0.0, forward[c, 0] - head_forward)
        for s in range(1, p):
            prev_diff += m * max(0.0, running - forward[c, s])
            running = max(running, forward[c, s])
    next_diff = 0.0
    running = forward[v - 1, p - 1]
    for s in range(p - 2, -1, -1):
        next_diff += m * max(0.0, running - forward[v - 1, s])
        running = max(running, forward[v - 1, s])
    return total + chunks_sum + prev_diff + next_diff


def assignment_frame(setup: BalanceSetup, counts: np.ndarray) -> pd.DataFrame:
    """Tidy rows ``kind, chunk, stage, option, layers`` (layers > 0).

    Cells in model order, a cell's kinds in model order, a kind's options most
    recomputed first (the order MindFormers gives a cell's layers).
    """
    rows = []
    for chunk, stage in setup.cells:
        for item in setup.cell_order:
            kind, option = setup.items[item]
            layers = int(round(counts[item, chunk, stage]))
            if layers:
                rows.append((kind, chunk, stage, option, layers))
    return pd.DataFrame(rows, columns=[KIND, CHUNK, STAGE, OPTION, LAYERS])


def counts_from_assignment(setup: BalanceSetup, assignment: pd.DataFrame) -> np.ndarray:
    """The ``counts[item, chunk, stage]`` array of an assignment frame; under DualPipe the frame places one copy
    (chunk 0, :func:`sappkit.even_assignment`) and the other mirrors it, stage ``p - 1 - s`` on rank ``s``."""
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    index = {item: i for i, item in enumerate(setup.items)}
    for kind, option, chunk, stage, layers in zip(*(assignment[key].to_numpy() for key in (KIND, OPTION, CHUNK, STAGE,
                                                                                          LAYERS))):
        counts[index[(kind, option)], chunk, stage] += int(layers)
    if setup.schedule in TWO_DIRECTIONS:
        if counts[:, 1].any():
            raise InputError(f"an assignment for schedule {setup.schedule!r} places one model copy, on chunk 0 "
                             f"(the other mirrors it); got {int(counts[:, 1].sum())} layers on chunk 1")
        counts[:, 1] = counts[:, 0, ::-1]
    return counts
