"""Which ops set the step: one longest path walked back (:func:`critical_path`), and a longest path through
each stage (:func:`stage_critical_paths`), on a step graph (:mod:`sappkit.pipeline.critical`).

A change of the durations that does not shorten the path :func:`critical_path` walks cannot shorten the
step; every stage's path bounds the step from below whatever the durations.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .critical import StepGraph, ends_by_op, ends_of_one, levels_of

__all__ = ["critical_path", "stage_critical_paths"]


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
    >>> from sappkit.pipeline.critical import step_graph
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> times, paths = stage_critical_paths(graph, [[1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0]])
    >>> times.tolist(), paths[0, :, :4].tolist()
    ([9.0], [[1.0, 2.0, 1.0, 2.0], [1.0, 2.0, 1.0, 2.0]])
    """
    durations = np.atleast_2d(np.asarray(durations, dtype=float))
    rows = len(durations)
    ends, tails = ends_by_op(graph, durations, p2p_time), _tails(graph, durations, p2p_time)
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
    >>> from sappkit.pipeline.critical import step_graph
    >>> graph = step_graph("1f1b", 2, 2, 1, 1, False)
    >>> critical_path(graph, [1.0, 1.0, 2.0, 2.0, 0, 0, 0, 0]).tolist()
    [1.0, 2.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    """
    durations = np.asarray(durations, dtype=float).tolist()
    ends = (ends_of_one(graph, durations, p2p_time) if ends is None
            else np.asarray(ends, dtype=float)[levels_of(graph).row].tolist())
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
