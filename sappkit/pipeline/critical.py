"""The step time as a longest path: many candidate cost vectors at once, and the path that sets it.

A schedule's step is a fixed dependency graph over its ops (:mod:`sappkit.pipeline.events`): an op starts
when the op before it on its stage has ended and its input is ready (plus ``p2p_time`` across stages). Its
end is therefore ``max(end(previous), end(input) + p2p) + duration``, and the step time is the longest path
through the graph, the op durations being the cells' forward, backward, input- and weight-pass times. The
graph does not depend on the durations, so it is levelled once per pipeline shape (an op's *level* is the
most ops on any path that reaches it) and evaluated level by level with numpy, for a whole batch of
duration vectors in one sweep: :func:`step_times`. The arithmetic is the simulator's, operation for
operation, so the result equals :func:`sappkit.simulate`'s ``step_time`` exactly.

Which path sets the step is :mod:`sappkit.pipeline.paths`' (:func:`~sappkit.pipeline.paths.critical_path`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .events import StepPlan, op_starts, step_plan
from .phases import BACKWARD, BACKWARD_INPUT, FORWARD

__all__ = ["StepGraph", "step_graph", "graph_of", "stage_paths", "step_times", "step_ends", "step_runs", "op_ends",
           "ends_by_op", "ends_of_one", "levels_of"]


@dataclass(frozen=True, eq=False)
class StepGraph:
    """A step plan's ops levelled for batch evaluation (built by :func:`graph_of`).

    Ops are numbered in the step plan's order (stage-major, run order);
    ``previous`` and ``source`` point at the op before on the stage and the
    op whose output the op waits for, ``ops`` (one past the last op) where
    there is none: a slot that always ends at 0.
    """

    ops: int
    durations: int
    """Length of a duration vector: ``4 L`` for ``L`` cells (forward, backward, input pass, weight pass)."""
    previous: np.ndarray
    source: np.ndarray
    crosses: np.ndarray
    """The input comes from another stage (``p2p_time`` applies)."""
    duration: np.ndarray
    """Each op's index into the duration vector: ``phase L + position`` of its cell in model order."""
    steps: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]
    """Per level, ascending: its ops, their previous ops then their input ops, their duration indices. Every
    op's previous and input ops lie on earlier levels."""
    order: tuple[tuple[int, int, int, bool, int], ...]
    """Every op as ``(op, previous, source, crosses, duration index)``, level by level."""
    paths: np.ndarray
    """``[path, duration]``: paths through every stage (:func:`stage_paths`), how often each duration lies on
    each; their lengths bound the step time from below whatever the durations."""


@lru_cache(maxsize=32)
def step_graph(schedule: str, p: int, m: int, v: int, k: int, less_memory: bool) -> StepGraph:
    """The levelled graph of a validated pipeline shape's own step order (cached per shape)."""
    return graph_of(step_plan(schedule, p, m, v, k, less_memory), p)


def graph_of(plan: StepPlan, p: int) -> StepGraph:
    """Level a step plan: each op's previous op, input op and level, from the event loop run on unit times."""
    ops = sum(len(stage) for stage in plan.stage_ops)
    producer = {}
    index = 0
    for stage in plan.stage_ops:
        for slot, _, _, _, passes_on in stage:
            producer[slot] = index
            if passes_on >= 0:  # a paired op's output, ready when this op ends
                producer[passes_on] = index
            index += 1
    previous, source, crosses, duration = (np.full(ops, ops), np.full(ops, ops), np.zeros(ops, bool),
                                           np.zeros(ops, int))
    index = 0
    for stage in plan.stage_ops:
        for position, (_, dependency, cross, cost, _) in enumerate(stage):
            if position:
                previous[index] = index - 1
            if dependency >= 0:
                source[index], crosses[index] = producer[dependency], cross
            duration[index] = cost
            index += 1
    # With every op taking one unit and no transfer time, an op starts at its level.
    level = np.array(op_starts(plan, [1.0] * (4 * plan.cell_count), 0.0, p), dtype=int)
    order = np.argsort(level, kind="stable")
    bounds = np.flatnonzero(np.diff(level[order])) + 1
    steps = tuple((members, np.concatenate([previous[members], source[members]]), duration[members])
                  for members in np.split(order, bounds))
    one_by_one = tuple(zip(*(a[order].tolist() for a in (np.arange(ops), previous, source, crosses, duration))))
    return StepGraph(ops=ops, durations=4 * plan.cell_count, previous=previous, source=source, crosses=crosses,
                     duration=duration, steps=steps, order=one_by_one, paths=stage_paths(plan))


def stage_paths(plan: StepPlan) -> np.ndarray:
    """Paths through each stage's ops, as counts per duration (rows of ``4 L``; two per stage, three where
    the stage's last gradient op is not its last op, as with split backwards).

    Stage ``s`` first runs a forward of its first cell ``(0, s)`` (the
    stage's earliest in model order); its gradient ops ``G`` of that cell (a
    backward, or an input pass) pass the gradient on to ``(0, s - 1)``.

    - **Through the stage**: the forward of the stage's first unit through
      the cells before ``(0, s)``, the stage's ops up to its last ``G(0, s)``,
      that unit's gradient down the cells before (or, without that, all the
      stage's ops).
    - **Round trip**: the forward of the unit of the stage's first ``G(0, s)``
      through every cell (of the first model copy, under DualPipe), its
      gradient back up to ``(0, s)``, the stage's ops
      from there to its last ``G(0, s)``, that unit's gradient down the cells
      before: every cell's forward and gradient once, and the stage's
      steady state.

    Each is a chain of dependencies and stage order, so its length never
    exceeds the step time. Under DualPipe the paths follow the first model
    copy's cells; the longest path may also cross the second copy's and
    DualPipe's pairs (an overlapped forward's output waits for the backward
    after it), so on equal cells they stay below the step.
    """
    L = plan.cell_count
    run = L // plan.copies  # stage s's first cell lies on the first copy's run of cells
    gradient_of = {(int(i), int(u)): int(ph) for ph, i, u in zip(plan.phase, plan.position, plan.unit)
                   if ph in (BACKWARD, BACKWARD_INPUT)}

    def chain(cells, unit, forward=False):
        """Counts of the ops of ``unit`` on ``cells``: its forwards, or its gradients."""
        counts = np.zeros(4 * L)
        for i in cells:
            counts[(FORWARD if forward else gradient_of[int(i), unit]) * L + i] += 1
        return counts

    rows = []
    begin = 0
    for s, stage in enumerate(plan.stage_ops):
        phase, position, unit = (a[begin:begin + len(stage)] for a in (plan.phase, plan.position, plan.unit))
        begin += len(stage)
        first = plan.cells.index((0, s))
        gradients = np.flatnonzero((position == first) & ((phase == BACKWARD) | (phase == BACKWARD_INPUT)))
        join, leave = int(gradients[0]), int(gradients[-1])
        before, after = range(first), range(first + 1, run)
        ops = np.zeros((len(stage), 4 * L))
        ops[np.arange(len(stage)), phase * L + position] = 1
        drain = chain(before, int(unit[leave]))

        fill = chain(before, int(unit[0]), forward=True) if phase[0] == FORWARD and position[0] == first else 0.0
        rows.append(fill + ops[: leave + 1].sum(axis=0) + drain)
        if leave < len(stage) - 1:
            rows.append(fill + ops.sum(axis=0))
        trip = chain(range(run), int(unit[join]), forward=True) + chain(after, int(unit[join]))
        rows.append(trip + ops[join: leave + 1].sum(axis=0) + drain)
    return np.array(rows)


@dataclass(frozen=True)
class _Levels:
    """A graph's ops stored level by level (a level's ops in consecutive rows), for :func:`_level_ends`."""

    row: np.ndarray
    """``[op + 1]``: each op's row (the last, ``graph.ops``, the row of zeros)."""
    cost: np.ndarray
    """``[row]``: each row's index into the duration vector."""
    levels: tuple[tuple[int, int, np.ndarray, np.ndarray], ...]
    """Per level: its rows ``lo:hi``, the rows of their previous ops then of their input ops, and whether each
    input crosses stages."""
    widest: int
    """The most ops on one level."""


@lru_cache(maxsize=32)
def levels_of(graph: StepGraph) -> _Levels:
    """The rows of :class:`_Levels`: the ops in level order (cached per graph)."""
    order = np.concatenate([ops for ops, _, _ in graph.steps])
    row = np.empty(graph.ops + 1, dtype=np.intp)
    row[order], row[graph.ops] = np.arange(graph.ops), graph.ops
    levels, lo = [], 0
    for ops, inputs, _ in graph.steps:
        levels.append((lo, lo + len(ops), row[inputs], graph.crosses[ops]))
        lo += len(ops)
    return _Levels(row=row, cost=graph.duration[order], levels=tuple(levels),
                   widest=max(len(ops) for ops, _, _ in graph.steps))


def _level_ends(graph: StepGraph, durations: np.ndarray, p2p_time: float) -> np.ndarray:
    """End time of every op ``[row, row of durations]``, the ops in :func:`levels_of`' rows (then a row of
    zeros): the ops of a level lie in consecutive rows, so a level's work is three calls, in place, whatever
    its width (a level of a p = 16 step holds a dozen ops: the calls, not the arithmetic, cost the time)."""
    layout = levels_of(graph)
    durations = np.atleast_2d(np.asarray(durations, dtype=float))
    ends = np.empty((graph.ops + 1, len(durations)))
    # each op's duration, to which its start is added; [duration, row] in memory: whole rows gathered
    np.take(np.ascontiguousarray(durations.T), layout.cost, axis=0, out=ends[:-1], mode="clip")
    ends[-1] = 0.0
    ready = np.empty((2 * layout.widest, len(durations)))
    for lo, hi, inputs, crosses in layout.levels:
        width = hi - lo
        gathered = np.take(ends, inputs, axis=0, out=ready[:2 * width], mode="clip")
        if p2p_time:
            gathered[width:][crosses] += p2p_time
        ends[lo:hi] += np.maximum(gathered[:width], gathered[width:], out=gathered[:width])
    return ends


def ends_by_op(graph: StepGraph, durations: np.ndarray, p2p_time: float) -> np.ndarray:
    """End time of every op (and a last row of zeros), ``[op, row of durations]``."""
    return _level_ends(graph, durations, p2p_time)[levels_of(graph).row]


def ends_of_one(graph: StepGraph, durations: list[float], p2p_time: float) -> list[float]:
    """End time of every op (and a last zero) for one duration vector: the same arithmetic, op by op."""
    ends = [0.0] * (graph.ops + 1)
    for op, previous, source, crosses, cost in graph.order:
        ready = ends[source] + p2p_time if crosses else ends[source]
        free = ends[previous]
        ends[op] = (free if free > ready else ready) + durations[cost]
    return ends


def step_times(graph: StepGraph, durations: np.ndarray, p2p_time: float = 0.0) -> np.ndarray:
    """The step time for each row of ``durations`` (shape ``(n, graph.durations)``), as :func:`sappkit.simulate`.

    Examples
    --------
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> step_times(graph, [[1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0], [1.0, 2.0, 2.0, 2.0, 0, 0, 0, 0]]).tolist()
    [9.0, 11.0]
    """
    return _level_ends(graph, durations, p2p_time)[:-1].max(axis=0)


def step_ends(graph: StepGraph, durations: np.ndarray, p2p_time: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``durations``: the step time and the sum of every op's end time.

    The sum falls whenever ops end earlier: a search on the step time uses it
    to prefer, among placements of one step time, those whose other paths
    got shorter too.

    Examples
    --------
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> [x.tolist() for x in step_ends(graph, [[1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0]])]
    [[9.0], [36.0]]
    """
    times, sums, _ = step_runs(graph, durations, p2p_time)
    return times, sums


def step_runs(graph: StepGraph, durations: np.ndarray,
              p2p_time: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`step_ends` and every op's end time ``[op, row]`` (the ops level by level, then a row of zeros):
    a column of the last gives :func:`~sappkit.pipeline.paths.critical_path` of its row without timing it again.

    Examples
    --------
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> durations = [[1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0]]
    >>> times, sums, ends = step_runs(graph, durations)
    >>> from sappkit.pipeline.paths import critical_path
    >>> critical_path(graph, durations[0], ends=ends[:, 0]).tolist()
    [1.0, 2.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    """
    ends = _level_ends(graph, durations, p2p_time)
    return ends[:-1].max(axis=0), ends[:-1].sum(axis=0), ends


def op_ends(graph: StepGraph, durations, p2p_time: float = 0.0) -> np.ndarray:
    """The end time of every op of one duration vector, in the step plan's op order (stage-major, run order).

    Examples
    --------
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> op_ends(graph, [1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0]).tolist()
    [1.0, 2.0, 6.0, 9.0, 2.0, 4.0, 5.0, 7.0]
    """
    return np.array(ends_of_one(graph, np.asarray(durations, dtype=float).tolist(), p2p_time)[:-1])
