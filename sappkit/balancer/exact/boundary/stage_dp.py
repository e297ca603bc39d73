"""The DP over stages of :mod:`.search`'s search: the patterns of a boundary chunk, the min-max over stages
of the stage tables' values with state (before or after the boundary, ``n0``, ``n1``), and the placement it
picks.

A boundary chunk whose listed contents make up no placement is not priced
(:func:`optimum`); :func:`unpriced_bound` finds the DP's optimum with every
content at its least value, the lower bound the searches start from.
"""

from __future__ import annotations

import numpy as np

from ..cells import Cache
from ..segments import within
from ...setup import V_SHAPED, BalanceSetup
from .stage_cells import counts_of, stage_key
from .stage_tables import StageTable, stage_table

__all__ = ["GROWTH", "boundary_chunks", "chunk_optimum", "chunk_patterns", "optimum", "placement", "stage_counts",
           "unpriced_bound", "work"]

#: How a search's cap on its objective grows when no placement lies under it.
GROWTH = 1.15


def boundary_chunks(setup: BalanceSetup) -> range:
    """The chunks the first kind may end on (one stands for all with one kind, whose patterns coincide)."""
    return range(setup.chunks if len(setup.kinds) == 2 else 1)


def work(setup: BalanceSetup, values: np.ndarray, pick) -> float:
    """Every layer's ``values`` on the option ``pick`` (min or max) takes for its kind, summed."""
    return float(setup.counts @ np.array([pick(values[setup.item_indices(kind)]) for kind in setup.kinds]))


def chunk_patterns(setup: BalanceSetup, boundary_chunk: int) -> tuple[tuple, tuple, tuple]:
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
    ``max(state[n0 - a, n1 - b], table[a, b])``, and the entry taken (its a, b); computed only within the box
    the entries the state holds (below inf) reach."""
    shape = state.shape
    best, best_a, best_b = np.full(shape, np.inf), np.zeros(shape, int), np.zeros(shape, int)
    a, b = np.nonzero(np.isfinite(table))
    held0, held1 = np.nonzero(state < np.inf)
    if not a.size or not held0.size:
        return best, best_a, best_b
    box = tuple(slice(held.min() + step.min(), min(size, held.max() + step.max() + 1))
                for held, step, size in ((held0, a, shape[0]), (held1, b, shape[1])))
    if any(side.start >= side.stop for side in box):
        return best, best_a, best_b
    n0, n1 = np.meshgrid(np.arange(box[0].start, box[0].stop), np.arange(box[1].start, box[1].stop), indexing="ij")
    src0, src1 = n0[None] - a[:, None, None], n1[None] - b[:, None, None]
    valid = (src0 >= 0) & (src1 >= 0)
    offered = np.where(valid, np.maximum(state[np.maximum(src0, 0), np.maximum(src1, 0)],
                                         table[a, b][:, None, None]), np.inf)
    entry = offered.argmin(axis=0)
    best[box] = np.take_along_axis(offered, entry[None], axis=0)[0]
    best_a[box], best_b[box] = a[entry], b[entry]
    return best, best_a, best_b


def _solve(setup: BalanceSetup, tables: list[tuple[StageTable, StageTable, StageTable]],
           exact: bool) -> tuple[float, list[tuple[int, int]]]:
    """Least largest stage value for one boundary chunk, and per stage (which pattern, content index)."""
    n0, n1 = counts_of(setup)
    before = np.full((n0 + 1, n1 + 1), np.inf)
    before[0, 0] = -np.inf
    after = np.full_like(before, np.inf)
    steps = []
    for stage_tables in tables:
        values = [t.exact if exact else t.relaxed for t in stage_tables]
        stay, stay_a, stay_b = _advance(before, values[0])
        if len(setup.kinds) == 1:  # one pattern: every stage may be the boundary's, one chain is all
            steps.append((stay_a, stay_b, stay_a, stay_b, np.ones(stay.shape, bool)))
            before = after = stay
            continue
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


def placement(setup: BalanceSetup, tables, picks) -> np.ndarray:
    """The counts of the picked contents: every cell on its lightest point under the content's backward cap,
    within the working-set group of the content's exact pricing."""
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    for s, (pattern, content) in enumerate(picks):
        table = tables[s][pattern]
        counts[:, :, s], _ = stage_counts(setup, table, content, table.beta[content], int(table.group[content]))
    return counts


def stage_counts(setup: BalanceSetup, table: StageTable, content: int, beta: np.ndarray,
                  group: int) -> tuple[np.ndarray, float]:
    """``[item, chunk]``: the table's ``content`` with every cell on its lightest point under its cap in
    ``beta``, within the working-set groups ``group`` (an index into their product); and the largest backward
    of its cells but the last."""
    counts, backward = np.zeros((len(setup.items), setup.chunks), dtype=int), 0.0
    groups = np.unravel_index(group, [len(cell.working) for cell in table.cells])
    for c, cell in enumerate(table.cells):
        composition = table.contents[content, c:c + 1]
        _, step = cell.least_activation(composition, beta[c:c + 1])
        point = int(step[0, groups[c]])
        counts[:, c] = cell.mix(int(composition[0]), point)
        if c < len(table.cells) - 1:
            backward = max(backward, float(cell.stairs.backward[point]))
    return counts, backward


def optimum(setup: BalanceSetup, cache: Cache, cap: float, measure: str, sigma: float | None = None,
             priced: bool = True):
    """(relaxed optimum, exact optimum, its placement or None) of the min-max over stages of their values (the
    stage time, ``L`` under ``sigma``, or memory) over every boundary chunk under ``cap``; None past the
    enumeration budget. Unpriced (:func:`~.stage_tables.stage_table`), the relaxed optimum alone
    (:func:`unpriced_bound`). A boundary chunk whose listed contents make up no placement (its
    unpriced optimum passes ``cap``: every listed content is under it) is not priced."""
    cache.check_time()
    relaxed_best, exact_best, counts = np.inf, np.inf, None
    for boundary_chunk in boundary_chunks(setup):
        if priced and measure != "memory":
            unpriced = chunk_optimum(setup, cache, boundary_chunk, cap, measure, None, False)
            if unpriced is None:
                return None
            if not within(unpriced[0], cap):
                relaxed_best = min(relaxed_best, unpriced[0])
                continue
        found = chunk_optimum(setup, cache, boundary_chunk, cap, measure, sigma, priced)
        if found is None:
            return None
        relaxed, value, placed, _, _ = found
        relaxed_best = min(relaxed_best, relaxed)
        if placed is not None and value < exact_best:
            exact_best, counts = value, placed
    return relaxed_best, exact_best, counts


def chunk_optimum(setup: BalanceSetup, cache: Cache, boundary_chunk: int, cap: float, measure: str,
                   sigma: float | None, priced: bool):
    """:func:`optimum` for one boundary chunk; unpriced optima cached, the search asks for them every round."""
    key = stage_key(setup, "optimum", boundary_chunk, measure, round(cap, 9), sigma) if not priced else None
    if key in cache.stages:
        return cache.stages[key]
    patterns = chunk_patterns(setup, boundary_chunk)
    tables = []
    for s in range(setup.stages):
        stage = tuple(stage_table(setup, cache, s, pattern, cap, measure, sigma, priced) for pattern in patterns)
        if any(table is None for table in stage):
            return None
        tables.append(stage)
    relaxed, _ = _solve(setup, tables, exact=False)
    found = (relaxed, np.inf, None, tables, [])
    if priced:
        value, picks = _solve(setup, tables, exact=True)
        found = (relaxed, value, placement(setup, tables, picks) if picks else None, tables, picks)
    if key is not None:
        cache.stages[key] = found
    return found


def unpriced_bound(setup: BalanceSetup, cache: Cache, tau: float, ceiling: float, measure: str) -> float | None:
    """The min-max DP's optimum with every content at its least value (memory past its lightest point aside),
    from the cap ``tau`` grown until the optimum lies under it: every content of a better placement is then
    listed, so it bounds the objective from below, found with listings and DPs alone (the split objective's
    stage value ``S_s + max(L_s, S_s)`` is at most its ``S + max(L, S)``). None past the enumeration budget,
    inf where nothing is listed up to ``ceiling``."""
    while True:
        found = optimum(setup, cache, tau, measure, priced=False)
        if found is None:
            return None
        if within(found[0], tau):
            return found[0]
        if tau >= ceiling:
            return np.inf
        tau = min(tau * GROWTH, ceiling)
