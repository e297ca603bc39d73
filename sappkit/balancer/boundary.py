"""Exact search for one or two body kinds over several chunks: a DP over stages that carries the kind boundary.

With ``v > 1`` chunks a stage holds ``v`` cells far apart in model order, so
the run DP of :mod:`.segments` does not apply. With two kinds in model order
the first kind's last layer sits on one cell, the *boundary cell* ``(c*,
s*)``: cells before it in model order hold the first kind only, cells after
it the second only, and it may hold the end of the first and the start of
the second (not on DualPipeV's chunk 1, where seed 003's frontier counts the
cell itself as earlier). So for a boundary chunk ``c*`` every stage's cells
follow one of three patterns: the one of the stages before ``s*`` in the
DP's stage order, the boundary stage's, the one after. One kind is the
case ``n1 = 0`` with one pattern; pricing a cell's layer count rather
than every product of its front points is what makes this search faster
than :mod:`.exact`'s enumeration there too.

Per stage and pattern the search lists every product of the cells'
compositions (layers of each kind) whose stage time can stay under a cap
``tau``. A cell's contents are points of its composition's front
(:func:`~sappkit.balancer.segments.run_front`), and for a backward cap
``beta`` the lightest point under it is all memory needs (memory grows with
every cell's activation and charged working set; a charged cell keeps one
such staircase per working set), so a product is priced at the least
``beta`` that fits, by bisection, and contents are priced per layers of
each kind ``(n0, n1)`` only while they could beat the best found. A DP over
stages with state (before or after the boundary, ``n0``, ``n1``) finds the
least largest stage time: the ``sapp`` objective at levels 0 and 1 where
``m != p`` (``m = p`` splits it, and goes to :mod:`.exact` or the integer program). ``tau``
grows until the optimum lies under it, which proves it: a better placement
would use only listed contents. As in :mod:`.exact`, relaxed memory gives
the lower bound, exact memory the placement.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .cells import (
    COMBO_BUDGET, EPS, Cache, charged_chunks, fixed_memory, floor_weights, memory_bounds, monotone_chunks,
)
from ..columns import MEMORY_MB
from .evaluate import evaluate
from . import segments
from .segments import per_kind, run_front, within
from .setup import V_SHAPED, BalanceSetup

__all__ = ["applicable", "search", "least_memory"]

#: How the cap on the stage time grows when no placement lies under it; the memory cap's growth.
_GROWTH, _MEMORY_GROWTH = 1.15, 1.3


def applicable(setup: BalanceSetup) -> str:
    """Why the search does not apply to ``setup`` ('' when it does)."""
    if len(setup.kinds) > 2:
        return "more than two body kinds with more than one chunk"
    if setup.bottleneck_split and setup.level < 2:
        return "the split objective of m = p with more than one chunk and two body kinds"
    shared = segments.applicable(setup)
    if shared:
        return shared
    if not all(monotone_chunks(setup, s).all() for s in range(setup.stages)):
        return "a chunk whose stage memory falls as it holds more (DualPipeV under seed 003's overhead)"
    return ""


# ------------------------------------------------------------------ what a cell may hold


@dataclass(frozen=True)
class _Cell:
    """What one cell may hold, per composition (layers of each kind): its forward, parameters + memory kept
    once, and its front as staircases per working-set group (``working``): backward ascending, the least
    activation up to each backward and the front point giving it (inf / -1 padded)."""

    layers: np.ndarray  # [composition, kind]
    forward: np.ndarray  # [composition]
    kept: np.ndarray  # [composition]
    backward: np.ndarray  # [composition, group, step]
    activation: np.ndarray  # [composition, group, step]
    point: np.ndarray  # [composition, group, step]
    working: np.ndarray  # [group]
    fronts: list

    def least_activation(self, composition: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row and group: the least activation with backward <= ``beta`` (inf where none), and its step."""
        groups, steps = self.backward.shape[1:]
        row = composition[:, None] * groups + np.arange(groups)[None, :]
        top = self._span / 4
        query = np.minimum(beta, top) + EPS * np.maximum(1.0, np.minimum(np.abs(beta), top))
        step = np.searchsorted(self._sorted, query[:, None] + row * self._span, side="right") - row * steps - 1
        activation = self.activation[composition[:, None], np.arange(groups)[None, :], np.maximum(step, 0)]
        return np.where(step >= 0, activation, np.inf), step

    @cached_property
    def _span(self) -> float:
        finite = self.backward[np.isfinite(self.backward)]
        return 4.0 * (float(finite.max(initial=0.0)) + 1.0)

    @cached_property
    def _sorted(self) -> np.ndarray:
        """Every staircase's backward in one ascending array (row ``r`` shifted by ``r`` spans; padding above
        any query), for one :func:`np.searchsorted` over many rows."""
        span = self._span
        padded = np.where(np.isfinite(self.backward), self.backward, span / 2)
        return (padded.reshape(-1, padded.shape[-1]) + np.arange(padded.shape[0] * padded.shape[1])[:, None]
                * span).ravel()

    def mix(self, composition: int, group: int, step: int) -> np.ndarray:
        return self.fronts[composition].mix[self.point[composition, group, step]]


def _counts(setup: BalanceSetup) -> tuple[int, int]:
    """Layers of each body kind, ``(n, 0)`` with one kind: the search always counts two."""
    return int(setup.counts[0]), int(setup.counts[1]) if len(setup.kinds) == 2 else 0


def _per_kind(setup: BalanceSetup, values: np.ndarray) -> np.ndarray:
    """:func:`~sappkit.balancer.segments.per_kind` for the two kinds :func:`_counts` counts."""
    return np.r_[per_kind(setup, values), np.zeros(2 - len(setup.kinds))]


def _compositions(setup: BalanceSetup, c: int, s: int, holds) -> list[tuple[int, int]]:
    """Layers of each kind the cell may hold: ``holds`` is 0 or 1 (one kind), or ``"both"`` (the boundary
    cell: at least one layer of the first kind, the second's only where the cell may hold both)."""
    n0, n1 = _counts(setup)
    if holds == "both":
        second = range(n1 + 1) if not (setup.schedule in V_SHAPED and c == 1) else range(1)
        return [(a, b) for a in range(1, n0 + 1) for b in second]
    low = 0 if (c, s) in setup.reserved else 1
    return [(n, 0) if holds == 0 else (0, n) for n in range(low, (n0, n1)[holds] + 1)]


def _cell(setup: BalanceSetup, cache: Cache, c: int, s: int, holds, cap: float, measure: str) -> _Cell:
    """The compositions of cell ``(c, s)`` that may stay under ``cap`` (``"time"``: their least forward +
    backward; ``"memory"``: their least memory on an otherwise empty stage), with their fronts."""
    charge = c in charged_chunks(setup, s)
    forward_per, kept_per = _per_kind(setup, setup.forward), _per_kind(setup, setup.param + setup.once)
    least_work, lightest = _per_kind(setup, setup.forward + setup.backward), _per_kind(setup, setup.activation)
    fixed_f, fixed_b = setup.fixed_forward[c, s], setup.fixed_backward[c, s]
    floor = fixed_memory(setup, s)
    flight, charged = (weights[c] for weights in floor_weights(setup, s))
    rows = []
    for composition in _compositions(setup, c, s, holds):
        layers = np.array(composition)
        kept = float(layers @ kept_per)
        if measure == "time" and not within(layers @ least_work + fixed_f + fixed_b, cap):
            continue
        limit = setup.memory_mb if measure == "time" else cap
        if not within(floor + kept + flight * float(layers @ lightest), limit):
            continue  # no point of its front fits: skip building it
        front = run_front(setup, composition, cache, working=charge, lightest=measure == "memory")
        least_mb = floor + kept + (flight * front.activation + charged * front.charged()).min()
        if not within(least_mb, limit):
            continue
        rows.append((layers, float(layers @ forward_per) + fixed_f, kept, front))
    groups = np.unique(np.concatenate([front.charged() for *_, front in rows] + [np.zeros(0 if rows else 1)]))
    width = max([len(front.backward) for *_, front in rows], default=1)
    shape = (len(rows), len(groups), width)
    backward, activation, point = np.full(shape, np.inf), np.full(shape, np.inf), np.full(shape, -1)
    for k, (*_, front) in enumerate(rows):
        for g, w in enumerate(groups):
            members = np.flatnonzero(front.charged() == w)
            members = members[np.argsort(front.backward[members], kind="stable")]
            lightest = np.minimum.accumulate(front.activation[members])
            steps = np.arange(len(members))
            newest = np.maximum.accumulate(np.where(front.activation[members] <= lightest, steps, 0))
            backward[k, g, :len(members)] = front.backward[members] + fixed_b
            activation[k, g, :len(members)], point[k, g, :len(members)] = lightest, members[newest]
    return _Cell(np.array([r[0] for r in rows], dtype=int).reshape(-1, 2), np.array([r[1] for r in rows]),
                 np.array([r[2] for r in rows]), backward, activation, point, groups, [r[3] for r in rows])


# ------------------------------------------------------------------ stage tables


@dataclass(frozen=True)
class _StageTable:
    """One stage under one pattern: per layers ``(n0, n1)`` the best value and its content, with relaxed and
    with exact memory; a content is the cells' compositions (``contents``) with the backward cap and the
    working-set group of its exact pricing."""

    relaxed: np.ndarray  # [n0, n1] value
    exact: np.ndarray
    relaxed_pick: np.ndarray  # [n0, n1] content index
    exact_pick: np.ndarray
    contents: np.ndarray  # [content, chunk] composition index per cell
    beta: np.ndarray  # [content] backward cap of the exact pricing
    group: np.ndarray  # [content] the cells' working-set groups in the exact pricing (an index into their product)
    cells: list[_Cell]


def _contents(setup: BalanceSetup, cells: list[_Cell], s: int, cap: float, measure: str):
    """Every product of the cells' compositions within the layer counts and under ``cap`` at its least
    (stage time with every cell on its fastest point; or memory), as composition indices per cell."""
    n0, n1 = _counts(setup)
    contents = np.zeros((1, 0), dtype=int)
    layers, forward, backward = np.zeros((1, 2), dtype=int), np.zeros(1), np.zeros(1)
    memory = np.full(1, fixed_memory(setup, s))
    limit = setup.memory_mb if measure == "time" else cap
    flights, charges = floor_weights(setup, s)
    for c, cell in enumerate(cells):
        fastest = cell.backward[:, :, 0].min(axis=1)
        lightest = (flights[c] * cell.activation.min(axis=-1) + charges[c] * cell.working[None, :]).min(axis=1)
        left = np.repeat(np.arange(len(contents)), len(cell.kept))
        right = np.tile(np.arange(len(cell.kept)), len(contents))
        new_layers = layers[left] + cell.layers[right]
        new_forward = np.maximum(forward[left], cell.forward[right])
        new_backward = np.maximum(backward[left], fastest[right])
        new_memory = memory[left] + cell.kept[right] + lightest[right]
        keep = (new_layers[:, 0] <= n0) & (new_layers[:, 1] <= n1) & within(new_memory, limit)
        if measure == "time":
            keep &= within(new_forward + new_backward, cap)
        if keep.sum() > COMBO_BUDGET:
            return None
        contents = np.column_stack([contents[left[keep]], right[keep]])
        layers, forward, backward, memory = new_layers[keep], new_forward[keep], new_backward[keep], new_memory[keep]
    return contents, layers, forward, backward


def _priced(setup: BalanceSetup, cells: list[_Cell], s: int, contents: np.ndarray, beta: np.ndarray):
    """Relaxed and exact stage memory of the contents with every cell on its lightest point of backward <=
    ``beta``, each the least over the cells' working-set groups, and the exact one's groups (one index into
    their product)."""
    rows = len(contents)
    sizes = [len(cell.working) for cell in cells]
    groups = np.array(np.unravel_index(np.arange(int(np.prod(sizes))), sizes)).T  # [combination, chunk]
    activation = np.zeros((rows, len(groups), setup.chunks))
    kept = np.zeros(rows)
    for c, cell in enumerate(cells):
        least, _ = cell.least_activation(contents[:, c], beta)
        activation[:, :, c] = least[:, groups[:, c]]
        kept += cell.kept[contents[:, c]]
    working = np.broadcast_to(np.stack([cell.working[groups[:, c]] for c, cell in enumerate(cells)], axis=1),
                              activation.shape).reshape(-1, setup.chunks)
    flat = activation.reshape(-1, setup.chunks)
    finite = np.isfinite(flat).all(axis=1)
    relaxed, exact = memory_bounds(setup, s, np.zeros_like(flat), np.where(finite[:, None], flat, 0.0), working)
    relaxed = np.where(finite, relaxed, np.inf).reshape(rows, len(groups)) + kept[:, None]
    exact = np.where(finite, exact, np.inf).reshape(rows, len(groups)) + kept[:, None]
    return relaxed.min(axis=1), exact.min(axis=1), exact.argmin(axis=1)


def _least_beta(setup, cells, s, contents, grid, low, exact: bool) -> np.ndarray:
    """Per content the least index into ``grid`` (from ``low``) whose backward cap lets the stage fit the
    memory limit (relaxed or exact); ``len(grid)`` where none does: a bisection, memory falls as the cap
    grows."""
    lo, hi = low.copy(), np.full(len(contents), len(grid))
    while (lo < hi).any():
        mid = (lo + hi) // 2
        probe = np.minimum(mid, len(grid) - 1)
        relaxed, exact_mb, _ = _priced(setup, cells, s, contents, grid[probe])
        fits = within(exact_mb if exact else relaxed, setup.memory_mb) & (mid < len(grid))
        active = lo < hi
        hi = np.where(active & fits, mid, hi)
        lo = np.where(active & ~fits, mid + 1, lo)
    return lo


def _stage_table(setup: BalanceSetup, cache: Cache, s: int, pattern: tuple, cap: float,
                 measure: str) -> _StageTable | None:
    """The stage's contents under ``cap``, priced at their least stage time that fits (``"time"``) or their
    least memory (``"memory"``); None past :data:`~sappkit.balancer.cells.COMBO_BUDGET`."""
    key = ("boundary", measure, s, pattern, round(cap, 9))
    if key in cache.stages:
        return cache.stages[key]
    cells = []
    for c, holds in enumerate(pattern):
        cell_key = ("boundary cell", measure, c, s, holds, round(cap, 9))
        if cell_key not in cache.stages:
            cache.stages[cell_key] = _cell(setup, cache, c, s, holds, cap, measure)
        cells.append(cache.stages[cell_key])
    listed = _contents(setup, cells, s, cap, measure)
    if listed is None:
        return None
    contents, layers, forward, fastest = listed
    shape = tuple(n + 1 for n in _counts(setup))
    everything = np.ones(len(contents), bool)
    if measure == "memory":
        relaxed, exact, group = _priced(setup, cells, s, contents, np.full(len(contents), np.inf))
        beta = np.full(len(contents), np.inf)
        tables = [_best_per_layers(layers, mb, everything, shape) for mb in (relaxed, exact)]
    else:
        values, beta, group = _fastest_that_fit(setup, cells, s, contents, layers, forward, fastest)
        tables = [_best_per_layers(layers, value, np.isfinite(value), shape) for value in values]
    table = _StageTable(tables[0][0], tables[1][0], tables[0][1], tables[1][1], contents, beta, group, cells)
    cache.stages[key] = table
    return table


def _fastest_that_fit(setup, cells, s, contents, layers, forward, fastest):
    """Per content its least stage time that fits (relaxed and exact memory), backward cap and groups; inf
    where none fits or where another content of the same layers is known to be as fast: contents are priced
    in rounds, each group's fastest-bounded first, until none left could beat its group's best."""
    grid = np.unique(np.concatenate([cell.backward[np.isfinite(cell.backward)] for cell in cells] + [[0.0]]))
    low = np.searchsorted(grid, fastest - EPS * np.maximum(1.0, fastest))
    bound = forward + grid[np.minimum(low, len(grid) - 1)]
    key = layers[:, 0] * (_counts(setup)[1] + 1) + layers[:, 1]
    order = np.lexsort((bound, key))
    best = np.full(int(key.max(initial=0)) + 1, np.inf)
    values = [np.full(len(contents), np.inf), np.full(len(contents), np.inf)]
    beta, group = np.full(len(contents), np.inf), np.zeros(len(contents), dtype=int)
    waiting = np.ones(len(contents), bool)
    width = 1
    while True:
        open_ = order[waiting[order] & (bound[order] < best[key[order]] - EPS * np.maximum(1.0, bound[order]))]
        if not open_.size:
            return values, beta, group
        starts = np.flatnonzero(np.r_[True, key[open_][1:] != key[open_][:-1]])
        rank = np.arange(len(open_)) - np.repeat(starts, np.diff(np.r_[starts, len(open_)]))
        batch = open_[rank < width]  # each group's least bounds, more every round
        width *= 2
        waiting[batch] = False
        index = _least_beta(setup, cells, s, contents[batch], grid, low[batch], exact=False)
        probe = grid[np.minimum(index, len(grid) - 1)]
        # exact memory is never below relaxed: where it fits at the relaxed cap that cap is its least too
        misses = (index < len(grid)) & ~within(_priced(setup, cells, s, contents[batch], probe)[1], setup.memory_mb)
        exact_index = index.copy()
        exact_index[misses] = _least_beta(setup, cells, s, contents[batch][misses], grid, index[misses], exact=True)
        for which, found in ((0, index), (1, exact_index)):
            values[which][batch] = np.where(found < len(grid), forward[batch] + grid[np.minimum(found, len(grid) - 1)],
                                            np.inf)
        beta[batch] = values[1][batch] - forward[batch]
        group[batch] = _priced(setup, cells, s, contents[batch], beta[batch])[2]
        np.minimum.at(best, key[batch], values[1][batch])


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
    """What each chunk holds on stages before the boundary stage (in stage order), on it, and after it (with one
    kind the three coincide, so any stage may play the boundary stage's part)."""
    if len(setup.kinds) == 1:
        return ((0,) * setup.chunks,) * 3
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
    n0, n1 = _counts(setup)
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
    """The counts of the picked contents: every cell on its lightest point under the content's backward cap,
    within the working-set group of the content's exact pricing."""
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    for s, (pattern, content) in enumerate(picks):
        table = tables[s][pattern]
        beta = np.array([table.beta[content]])
        groups = np.unravel_index(int(table.group[content]), [len(cell.working) for cell in table.cells])
        for c, cell in enumerate(table.cells):
            composition = table.contents[content, c:c + 1]
            _, step = cell.least_activation(composition, beta)
            counts[:, c, s] = cell.mix(int(composition[0]), int(groups[c]), int(step[0, groups[c]]))
    return counts


def _optimum(setup: BalanceSetup, cache: Cache, cap: float, measure: str):
    """(relaxed optimum, exact optimum, its placement or None) over every boundary chunk under ``cap``; None past
    the enumeration budget."""
    relaxed_best, exact_best, counts = np.inf, np.inf, None
    for boundary_chunk in range(setup.chunks if len(setup.kinds) == 2 else 1):
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
    if not evaluate(setup, _even_lightest(setup)).fits and _fits(setup, cache) is False:
        return True, None, np.inf, np.inf
    fixed = setup.fixed_forward.sum() + setup.fixed_backward.sum()
    least_work = float(setup.counts @ per_kind(setup, setup.forward + setup.backward) + fixed)
    most_work = float(setup.counts @ np.array([(setup.forward + setup.backward)[setup.item_indices(k)].max()
                                               for k in setup.kinds]) + fixed)
    tau, lower = least_work / (setup.stages * setup.chunks), -np.inf
    while True:
        found = _optimum(setup, cache, tau, "time")
        if found is None:
            return None
        relaxed, value, counts = found
        if within(relaxed, tau):
            lower = relaxed
            if counts is not None and within(value, tau):
                return bool(within(value, lower)), counts, value, lower
        else:
            lower = max(lower, tau)
        if tau >= most_work:  # every content was listed: no placement fits with exact memory
            return False, None, np.inf, lower
        # a placement found above the cap bounds the optimum: listing up to it proves it
        tau = min(tau * _GROWTH, most_work, value if counts is not None else np.inf)


def _even_lightest(setup: BalanceSetup) -> np.ndarray:
    """The model's layers spread evenly over the cells in model order, each on its kind's lightest option: a
    placement whose fit proves, cheaply, that one exists."""
    cells = setup.cells
    shares = np.diff(np.linspace(0, int(setup.counts.sum()), len(cells) + 1).round().astype(int))
    kind_of = np.repeat(np.arange(len(setup.kinds)), setup.counts)
    lightest = [min(setup.item_indices(kind), key=lambda i: setup.activation[i]) for kind in setup.kinds]
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    for (c, s), start, n in zip(cells, np.r_[0, np.cumsum(shares)[:-1]], shares):
        for k in kind_of[start:start + n]:
            counts[lightest[k], c, s] += 1
    return counts


def _fits(setup: BalanceSetup, cache: Cache) -> bool | None:
    """Whether some placement's relaxed memory fits the limit (False proves none fits); None past the budget."""
    found = _optimum(setup, cache, setup.memory_mb, "memory")
    return None if found is None else bool(within(found[0], setup.memory_mb))


def least_memory(setup: BalanceSetup, cache: Cache) -> np.ndarray | None:
    """The placement whose largest stage memory is least (time ignored); None past the enumeration budget.

    The cap starts at what the even, lightest placement needs: the optimum lies under it, so one listing
    usually proves it."""
    cap = float(evaluate(setup, _even_lightest(setup)).stages[MEMORY_MB].max())
    while True:
        found = _optimum(setup, cache, cap, "memory")
        if found is None:
            return None
        _, value, counts = found
        if counts is not None and within(value, cap):
            return counts
        cap *= _MEMORY_GROWTH
