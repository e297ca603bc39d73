"""Exact search for two body kinds over several chunks: a DP over stages that carries the kind boundary.

With ``v > 1`` chunks a stage holds ``v`` cells far apart in model order, so
the run DP of :mod:`.segments` does not apply. With two kinds in model order
the first kind's last layer sits on one cell, the *boundary cell* ``(c*,
s*)``: cells before it in model order hold the first kind only, cells after
it the second only, and it may hold the end of the first and the start of
the second (not on DualPipeV's chunk 1, where seed 003's frontier counts the
cell itself as earlier). So for a boundary chunk ``c*`` every stage's cells
follow one of three patterns: the one of the stages before ``s*`` in the
DP's stage order, the boundary stage's, the one after.

Per stage and pattern the search lists every product of cell contents (each
a point of its kind's Pareto front, or of the two kinds' run front on the
boundary cell, :func:`~sappkit.balancer.segments.run_front`) whose stage time
stays under a cap ``tau`` and keeps, per layers of each kind ``(n0, n1)``, the
fastest that fits. A DP over stages with state (before or after the
boundary, ``n0``, ``n1``) finds the least largest stage time: the ``sapp``
objective at levels 0 and 1 where ``m != p`` (``m = p`` splits it, and goes to
the integer program). ``tau`` grows until the optimum lies under it, which
proves it: a better placement would use only listed contents. As in
:mod:`.exact`, relaxed memory (the interleaved overhead without its
rounding) gives the lower bound, exact memory the placement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cells import COMBO_BUDGET, EPS, Cache, charged_chunks, fixed_memory, floor_weights, memory_bounds, monotone_chunks
from .segments import run_front
from .setup import V_SHAPED, BalanceSetup

__all__ = ["applicable", "search", "least_memory"]

#: How the cap on the stage time grows when no placement lies under it; the memory cap's growth.
_GROWTH, _MEMORY_GROWTH = 1.06, 1.3


def applicable(setup: BalanceSetup) -> str:
    """Why the search does not apply to ``setup`` ('' when it does)."""
    if len(setup.kinds) != 2:
        return "more than two body kinds with more than one chunk"
    if setup.level >= 2:
        return "optimization_level >= 2"
    if setup.bottleneck_split:
        return "the split objective of m = p with more than one chunk and two body kinds"
    if setup.consistency is not None:
        return "recompute consistency between body kinds"
    for kind in setup.kinds:
        index = setup.item_indices(kind)
        if np.ptp(setup.forward[index]) > 0 or np.ptp(setup.once[index]) > 0:
            return f"options of {kind!r} with different forward times or memory kept once"
    if not all(monotone_chunks(setup, s).all() for s in range(setup.stages)):
        return "a chunk whose stage memory falls as it holds more (DualPipeV under seed 003's overhead)"
    return ""


# ------------------------------------------------------------------ what a cell may hold


@dataclass(frozen=True)
class _Choices:
    """What one cell may hold, one row per content: layers of each kind, forward and backward (head and
    tail included), activation, the working set it charges, parameters + memory kept once, and the mix."""

    layers: np.ndarray  # [row, kind]
    forward: np.ndarray
    backward: np.ndarray
    activation: np.ndarray
    working: np.ndarray
    kept: np.ndarray
    mix: np.ndarray  # [row, item]


def _per_kind(setup: BalanceSetup, values: np.ndarray) -> np.ndarray:
    """Per body kind, the least of ``values`` over its options."""
    return np.array([values[setup.item_indices(kind)].min() for kind in setup.kinds])


def _compositions(setup: BalanceSetup, c: int, s: int, holds) -> list[tuple[int, int]]:
    """Layers of each kind the cell may hold: ``holds`` is 0 or 1 (one kind), or ``"both"`` (the boundary
    cell: at least one layer of the first kind, the second's only where the cell may hold both)."""
    n0, n1 = (int(n) for n in setup.counts)
    if holds == "both":
        second = range(n1 + 1) if not (setup.schedule in V_SHAPED and c == 1) else range(1)
        return [(a, b) for a in range(1, n0 + 1) for b in second]
    low = 0 if (c, s) in setup.reserved else 1
    return [(n, 0) if holds == 0 else (0, n) for n in range(low, (n0, n1)[holds] + 1)]


def _cell_choices(setup: BalanceSetup, cache: Cache, c: int, s: int, holds, cap: float, measure: str) -> _Choices:
    """The contents of cell ``(c, s)`` that may stay under ``cap``: ``"time"`` its forward + backward (all front
    points that also keep the stage's memory floor within the limit); ``"memory"`` the stage's memory floor
    (only each front's lightest points, all that memory needs)."""
    charge = c in charged_chunks(setup, s)
    forward_per, kept_per = _per_kind(setup, setup.forward), _per_kind(setup, setup.param + setup.once)
    least_work = _per_kind(setup, setup.forward + setup.backward)
    fixed_f, fixed_b = setup.fixed_forward[c, s], setup.fixed_backward[c, s]
    flight, charged = (weights[c] for weights in floor_weights(setup, s))
    floor = fixed_memory(setup, s)
    limit = setup.memory_mb if measure == "time" else cap
    parts = []
    for composition in _compositions(setup, c, s, holds):
        layers = np.array(composition)
        if measure == "time" and layers @ least_work + fixed_f + fixed_b > cap + EPS * max(1.0, cap):
            continue
        front = run_front(setup, composition, cache, working=charge, lightest=measure == "memory")
        forward = float(layers @ forward_per) + fixed_f
        backward = front.backward + fixed_b
        kept = float(layers @ kept_per)
        memory = floor + kept + flight * front.activation + charged * front.charged()
        keep = memory <= limit + EPS * max(1.0, limit)
        if measure == "time":
            keep &= forward + backward <= cap + EPS * max(1.0, cap)
        rows = np.flatnonzero(keep)
        parts.append((np.tile(layers, (rows.size, 1)), np.full(rows.size, forward), backward[rows],
                      front.activation[rows], front.charged()[rows], np.full(rows.size, kept), front.mix[rows]))
    if not parts:
        width = len(setup.items)
        return _Choices(np.zeros((0, 2), int), *(np.zeros(0) for _ in range(5)), np.zeros((0, width), int))
    return _Choices(*(np.concatenate(column) for column in zip(*parts)))


# ------------------------------------------------------------------ stage tables


@dataclass(frozen=True)
class _StageTable:
    """One stage under one pattern: per layers ``(n0, n1)`` the best value and its content, with relaxed and
    with exact memory; ``rows[content]`` the chosen row of each cell's choices."""

    relaxed: np.ndarray  # [n0, n1] value
    exact: np.ndarray
    relaxed_pick: np.ndarray  # [n0, n1] content index
    exact_pick: np.ndarray
    rows: np.ndarray  # [content, chunk]
    choices: list[_Choices]


def _stage_table(setup: BalanceSetup, cache: Cache, s: int, pattern: tuple, cap: float,
                 measure: str) -> _StageTable | None:
    """Every product of the cells' choices under ``cap`` (stage time, or memory floor), priced; None past
    :data:`~sappkit.balancer.cells.COMBO_BUDGET`."""
    key = ("boundary", measure, s, pattern, round(cap, 9))
    if key in cache.stages:
        return cache.stages[key]
    n0, n1 = (int(n) for n in setup.counts)
    choices = [_cell_choices(setup, cache, c, s, holds, cap, measure) for c, holds in enumerate(pattern)]
    floor = fixed_memory(setup, s)
    limit = setup.memory_mb if measure == "time" else cap
    rows = np.zeros((1, 0), dtype=int)
    layers = np.zeros((1, 2), dtype=int)
    most_forward, most_backward, memory = np.zeros(1), np.zeros(1), np.full(1, floor)
    for c, cell in enumerate(choices):
        left = np.repeat(np.arange(len(rows)), len(cell.kept))
        right = np.tile(np.arange(len(cell.kept)), len(rows))
        new_layers = layers[left] + cell.layers[right]
        new_forward = np.maximum(most_forward[left], cell.forward[right])
        new_backward = np.maximum(most_backward[left], cell.backward[right])
        flight, charged = (weights[c] for weights in floor_weights(setup, s))
        new_memory = memory[left] + cell.kept[right] + flight * cell.activation[right] + charged * cell.working[right]
        keep = (new_layers[:, 0] <= n0) & (new_layers[:, 1] <= n1) & (new_memory <= limit + EPS * max(1.0, limit))
        if measure == "time":
            keep &= new_forward + new_backward <= cap + EPS * max(1.0, cap)
        if keep.sum() > COMBO_BUDGET:
            return None
        rows = np.column_stack([rows[left[keep]], right[keep]])
        layers, memory = new_layers[keep], new_memory[keep]
        most_forward, most_backward = new_forward[keep], new_backward[keep]
    activation = np.stack([cell.activation[rows[:, c]] for c, cell in enumerate(choices)], axis=1)
    working = np.stack([cell.working[rows[:, c]] for c, cell in enumerate(choices)], axis=1)
    kept = sum(cell.kept[rows[:, c]] for c, cell in enumerate(choices))
    relaxed_mb, exact_mb = (bound + kept for bound in memory_bounds(
        setup, s, np.zeros_like(activation), activation, working))
    shape = (n0 + 1, n1 + 1)
    if measure == "time":
        time, fits = most_forward + most_backward, setup.memory_mb + EPS * max(1.0, setup.memory_mb)
        tables = [_best_per_layers(layers, time, mb <= fits, shape) for mb in (relaxed_mb, exact_mb)]
    else:  # least memory: every content counts, the limit aside
        tables = [_best_per_layers(layers, mb, np.ones(len(mb), bool), shape) for mb in (relaxed_mb, exact_mb)]
    table = _StageTable(tables[0][0], tables[1][0], tables[0][1], tables[1][1], rows, choices)
    cache.stages[key] = table
    return table


def _best_per_layers(layers: np.ndarray, value: np.ndarray, feasible: np.ndarray, shape) -> tuple:
    """Per ``(n0, n1)``: the least value among feasible contents and its index (inf, -1 where none)."""
    best, pick = np.full(shape, np.inf), np.full(shape, -1)
    ok = np.flatnonzero(feasible)
    if ok.size:
        order = ok[np.lexsort((value[ok], layers[ok, 1], layers[ok, 0]))]
        first = np.r_[True, (np.diff(layers[order, 0]) != 0) | (np.diff(layers[order, 1]) != 0)]
        chosen = order[first]
        best[layers[chosen, 0], layers[chosen, 1]] = value[chosen]
        pick[layers[chosen, 0], layers[chosen, 1]] = chosen
    return best, pick


# ------------------------------------------------------------------ the DP over stages


def _patterns(setup: BalanceSetup, boundary_chunk: int) -> tuple[tuple, tuple, tuple]:
    """What each chunk holds on stages before the boundary stage (in stage order), on it, and after it."""
    c = boundary_chunk
    reversed_chunk = setup.schedule in V_SHAPED and c == 1  # runs back up the V: later stages come first
    first, then = (1, 0) if reversed_chunk else (0, 1)
    earlier = tuple(0 if d < c else 1 for d in range(setup.chunks))

    def with_chunk(holds):
        return earlier[:c] + (holds,) + earlier[c + 1:]

    return with_chunk(first), with_chunk("both"), with_chunk(then)


def _advance(state: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One stage of the min-max DP: per ``(n0, n1)`` after it, the best over the table's entries ``(a, b)`` of
    ``max(state[n0 - a, n1 - b], table[a, b])``, and the entry taken (its a, b)."""
    a, b = np.nonzero(np.isfinite(table))
    shape = state.shape
    if not a.size:
        return np.full(shape, np.inf), np.zeros(shape, int), np.zeros(shape, int)
    n0, n1 = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    src0, src1 = n0[None] - a[:, None, None], n1[None] - b[:, None, None]
    valid = (src0 >= 0) & (src1 >= 0)
    offered = np.where(valid, np.maximum(state[np.maximum(src0, 0), np.maximum(src1, 0)],
                                         table[a, b][:, None, None]), np.inf)
    entry = offered.argmin(axis=0)
    return np.take_along_axis(offered, entry[None], axis=0)[0], a[entry], b[entry]


def _solve(setup: BalanceSetup, tables: list[tuple[_StageTable, _StageTable, _StageTable]],
           exact: bool) -> tuple[float, list[tuple[int, int]]]:
    """Least largest stage value for one boundary chunk, and per stage (which pattern, content index)."""
    n0, n1 = (int(n) for n in setup.counts)
    before = np.full((n0 + 1, n1 + 1), np.inf)
    before[0, 0] = -np.inf
    after = np.full_like(before, np.inf)
    steps = []
    for stage_tables in tables:
        values = [t.exact if exact else t.relaxed for t in stage_tables]
        stay, stay_a, stay_b = _advance(before, values[0])
        cross, cross_a, cross_b = _advance(before, values[1])
        keep, keep_a, keep_b = _advance(after, values[2])
        crossed = cross < keep
        steps.append((stay_a, stay_b, np.where(crossed, cross_a, keep_a), np.where(crossed, cross_b, keep_b),
                      crossed))
        before, after = stay, np.minimum(cross, keep)
    value = float(after[n0, n1])
    if not np.isfinite(value):
        return np.inf, []
    picks, phase, left = [], 1, (n0, n1)
    for s in range(setup.stages - 1, -1, -1):
        stay_a, stay_b, take_a, take_b, crossed = steps[s]
        if phase == 0:
            pattern, a, b = 0, stay_a[left], stay_b[left]
        else:
            pattern, a, b = (1 if crossed[left] else 2), take_a[left], take_b[left]
            phase = 0 if crossed[left] else 1
        table = tables[s][pattern]
        pick = (table.exact_pick if exact else table.relaxed_pick)[a, b]
        picks.append((pattern, int(pick)))
        left = (left[0] - int(a), left[1] - int(b))
    return value, picks[::-1]


def _placement(setup: BalanceSetup, tables, picks) -> np.ndarray:
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    for s, (pattern, content) in enumerate(picks):
        table = tables[s][pattern]
        for c, cell in enumerate(table.choices):
            counts[:, c, s] = cell.mix[table.rows[content, c]]
    return counts


def _optimum(setup: BalanceSetup, cache: Cache, cap: float, measure: str):
    """(relaxed optimum, exact optimum, its placement or None) over every boundary chunk under ``cap``; None past
    the enumeration budget."""
    relaxed_best, exact_best, counts = np.inf, np.inf, None
    for boundary_chunk in range(setup.chunks):
        patterns = _patterns(setup, boundary_chunk)
        tables = []
        for s in range(setup.stages):
            stage = tuple(_stage_table(setup, cache, s, pattern, cap, measure) for pattern in patterns)
            if any(table is None for table in stage):
                return None
            tables.append(stage)
        relaxed, _ = _solve(setup, tables, exact=False)
        relaxed_best = min(relaxed_best, relaxed)
        value, picks = _solve(setup, tables, exact=True)
        if picks and value < exact_best:
            exact_best, counts = value, _placement(setup, tables, picks)
    return relaxed_best, exact_best, counts


def search(setup: BalanceSetup, cache: Cache) -> tuple[bool, np.ndarray | None, float, float] | None:
    """(proven, placement, its stage-time value, lower bound) for ``setup``'s ``sapp`` objective; placement None
    (proven) when nothing fits; None past the enumeration budget."""
    if _fits(setup, cache) is False:
        return True, None, np.inf, np.inf
    fixed = setup.fixed_forward.sum() + setup.fixed_backward.sum()
    least_work = float(setup.counts @ _per_kind(setup, setup.forward + setup.backward) + fixed)
    most_work = float(setup.counts @ np.array([(setup.forward + setup.backward)[setup.item_indices(k)].max()
                                               for k in setup.kinds]) + fixed)
    tau, lower = least_work / (setup.stages * setup.chunks), -np.inf
    while True:
        found = _optimum(setup, cache, tau, "time")
        if found is None:
            return None
        relaxed, value, counts = found
        if relaxed <= tau + EPS * max(1.0, tau):
            lower = relaxed
            if counts is not None and value <= tau + EPS * max(1.0, tau):
                return bool(value <= lower + EPS * max(1.0, abs(lower))), counts, value, lower
        else:
            lower = max(lower, tau)
        if tau >= most_work:  # every content was listed: no placement fits with exact memory
            return False, None, np.inf, lower
        tau = min(tau * _GROWTH, most_work)


def _fits(setup: BalanceSetup, cache: Cache) -> bool | None:
    """Whether some placement's relaxed memory fits the limit (False proves none fits); None past the budget."""
    found = _optimum(setup, cache, setup.memory_mb, "memory")
    return None if found is None else bool(found[0] <= setup.memory_mb + EPS * max(1.0, setup.memory_mb))


def least_memory(setup: BalanceSetup, cache: Cache) -> np.ndarray | None:
    """The placement whose largest stage memory is least (time ignored); None past the enumeration budget."""
    cap = setup.memory_mb
    while True:
        found = _optimum(setup, cache, cap, "memory")
        if found is None:
            return None
        _, value, counts = found
        if counts is not None and value <= cap + EPS * max(1.0, cap):
            return counts
        cap *= _MEMORY_GROWTH
