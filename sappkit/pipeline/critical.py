"""The step time as a longest path: many candidate cost vectors at once, and the path that sets it.

A schedule's step is a fixed dependency graph over its ops (:mod:`sappkit.pipeline.events`): an op starts
when the op before it on its stage has ended and its input is ready (plus ``p2p_time`` across stages). Its
end is therefore ``max(end(previous), end(input) + p2p) + duration``, and the step time is the longest path
through the graph, the op durations being the cells' forward, backward, input- and weight-pass times. The
graph does not depend on the durations, so it is levelled once per pipeline shape (an op's *level* is the
most ops on any path that reaches it) and evaluated level by level with numpy, for a whole batch of
duration vectors in one sweep: :func:`step_times`. The arithmetic is the simulator's, operation for
operation, so the result equals :func:`sappkit.simulate`'s ``step_time`` exactly.

:func:`critical_path` walks one longest path back and counts how often each duration lies on it: a change
of the durations that does not shorten that path cannot shorten the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .events import StepPlan, op_starts, step_plan
from .phases import BACKWARD, BACKWARD_INPUT, FORWARD

__all__ = ["StepGraph", "step_graph", "graph_of", "stage_paths", "step_times", "step_ends", "step_runs", "op_ends",
           "critical_path", "stage_critical_paths"]


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
def _levels(graph: StepGraph) -> _Levels:
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
    """End time of every op ``[row, row of durations]``, the ops in :func:`_levels`' rows (then a row of
    zeros): the ops of a level lie in consecutive rows, so a level's work is three calls, in place, whatever
    its width (a level of a p = 16 step holds a dozen ops: the calls, not the arithmetic, cost the time)."""
    layout = _levels(graph)
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


def _ends(graph: StepGraph, durations: np.ndarray, p2p_time: float) -> np.ndarray:
    """End time of every op (and a last row of zeros), ``[op, row of durations]``."""
    return _level_ends(graph, durations, p2p_time)[_levels(graph).row]


def _ends_of_one(graph: StepGraph, durations: list[float], p2p_time: float) -> list[float]:
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
    a column of the last gives :func:`critical_path` of its row without timing it again.

    Examples
    --------
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> durations = [[1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0]]
    >>> times, sums, ends = step_runs(graph, durations)
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
    return np.array(_ends_of_one(graph, np.asarray(durations, dtype=float).tolist(), p2p_time)[:-1])


@lru_cache(maxsize=32)
def _successors(graph: StepGraph) -> np.ndarray:
    """``[op, slot]``: the op after each op on its stage, then the ops waiting for its output (``graph.ops``
    pads: a slot whose tail is always 0)."""
    waiting = [[] for _ in range(graph.ops + 1)]
    for op in range(graph.ops):
        waiting[graph.previous[op]].append(op)
    for op in range(graph.ops):
        waiting[graph.source[op]].append(op)
    width = max(len(w) for w in waiting[:-1])
    table = np.full((graph.ops + 1, width), graph.ops)
    for op, ops in enumerate(waiting[:-1]):
        table[op, : len(ops)] = ops
    return table


def _tails(graph: StepGraph, durations: np.ndarray, p2p_time: float) -> np.ndarray:
    """Length of the longest path from the start of every op to the end of the step (a last row of zeros),
    ``[op, row of durations]``: the ends' recurrence run backwards, level by level."""
    durations = np.atleast_2d(np.asarray(durations, dtype=float)).T
    tails = np.zeros((graph.ops + 1, durations.shape[1]))
    following = _successors(graph)
    transfer = np.r_[np.where(graph.crosses, p2p_time, 0.0), 0.0]
    for ops, _, cost in reversed(graph.steps):
        after = following[ops]
        crossing = np.where(graph.source[np.minimum(after, graph.ops - 1)] == ops[:, None], transfer[after], 0.0)
        tails[ops] = (tails[after] + crossing[..., None]).max(axis=1) + durations[cost]
    return tails


def stage_critical_paths(graph: StepGraph, durations: np.ndarray,
                         p2p_time: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``durations``: the step time and, per stage, a longest path through that stage's ops.

    An op's longest path through it is its end plus the longest path from its
    start to the step's end (the same recurrence run backwards); per stage the
    op where that is longest gives the path, walked back as
    :func:`critical_path` does and forward along the successor that sets it.
    Every path bounds the step from below whatever the durations (a search
    that must prove a step time can use each as a cut), and the stage that
    sets the step gives a longest path of the whole step.

    Returns
    -------
    times : ndarray ``[row]``
    paths : ndarray ``[row, stage, duration]``
        How often each duration lies on the path through each stage.

    Examples
    --------
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> times, paths = stage_critical_paths(graph, [[1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0]])
    >>> times.tolist(), paths[0, :, :4].tolist()
    ([9.0], [[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 1.0, 2.0]])
    """
    durations = np.atleast_2d(np.asarray(durations, dtype=float))
    rows = len(durations)
    ends, tails = _ends(graph, durations, p2p_time), _tails(graph, durations, p2p_time)
    cost = durations[:, graph.duration].T
    through = ends[:-1] + tails[:-1] - cost
    firsts = np.flatnonzero(graph.previous == graph.ops)
    bounds = np.r_[firsts, graph.ops]
    start_ops = np.stack([lo + through[lo:hi].argmax(axis=0) for lo, hi in zip(bounds[:-1], bounds[1:])], axis=1)
    row = np.indices(start_ops.shape)[0]
    transfer = np.r_[np.where(graph.crosses, p2p_time, 0.0), 0.0]
    following = _successors(graph)
    walker = np.arange(start_ops.size).reshape(start_ops.shape)
    visited = []  # (walker, duration index) of every op on a path
    op = start_ops.copy()
    while (op < graph.ops).any():  # forward: the successor whose tail sets this op's
        live = op < graph.ops
        visited.append(walker[live] * graph.durations + graph.duration[op[live]])
        after = following[op]
        crossing = np.where(graph.source[np.minimum(after, graph.ops - 1)] == op[..., None], transfer[after], 0.0)
        reach = tails[after, row[..., None]] + crossing
        pick = np.take_along_axis(after, reach.argmax(axis=-1)[..., None], axis=-1)[..., 0]
        op = np.where(live & (reach.max(axis=-1) > 0), pick, graph.ops)
    op = start_ops.copy()
    while True:  # back: the input if it sets the start, else the op before on the stage
        safe = np.minimum(op, graph.ops - 1)
        begin = ends[safe, row] - cost[safe, row]
        source = graph.source[safe]
        sets = (source < graph.ops) & (ends[source, row] + transfer[safe] >= begin - 1e-9 * np.maximum(1.0, begin))
        op = np.where(op < graph.ops, np.where(sets, source, graph.previous[safe]), graph.ops)
        live = op < graph.ops
        if not live.any():
            break
        visited.append(walker[live] * graph.durations + graph.duration[op[live]])
    counts = np.bincount(np.concatenate(visited), minlength=start_ops.size * graph.durations)
    return ends[:-1].max(axis=0), counts.reshape(rows, len(firsts), graph.durations).astype(float)


def critical_path(graph: StepGraph, durations: np.ndarray, p2p_time: float = 0.0,
                  ends: np.ndarray | None = None) -> np.ndarray:
    """How often each duration lies on one longest path of the step (a vector like ``durations``).

    One placement is timed op by op in level order (faster than a sweep of
    array operations per level), unless its op ``ends`` are given (a column
    of :func:`step_runs`, computed by the same arithmetic); from the op that
    ends last, the walk goes back to whichever of its previous op and its
    input set its start (the input on a tie).

    Examples
    --------
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> critical_path(graph, [1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0]).tolist()
    [1.0, 2.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    """
    durations = np.asarray(durations, dtype=float).tolist()
    ends = (_ends_of_one(graph, durations, p2p_time) if ends is None
            else np.asarray(ends, dtype=float)[_levels(graph).row].tolist())
    transfer = np.where(graph.crosses, p2p_time, 0.0).tolist()
    duration, source, previous = _walk_tables(graph)
    counts = np.zeros(graph.durations)
    op = int(np.argmax(ends[:-1]))
    while op < graph.ops:
        cost = duration[op]
        counts[cost] += 1
        start = ends[op] - durations[cost]
        earlier = source[op]
        if earlier < graph.ops and ends[earlier] + transfer[op] >= start - 1e-9 * max(1.0, abs(start)):
            op = earlier
        else:
            op = previous[op]
    return counts


@lru_cache(maxsize=32)
def _walk_tables(graph: StepGraph) -> tuple[list[int], list[int], list[int]]:
    """Each op's duration index, input op and previous op as lists (scalar lookups in a walk are faster)."""
    return graph.duration.tolist(), graph.source.tolist(), graph.previous.tolist()
