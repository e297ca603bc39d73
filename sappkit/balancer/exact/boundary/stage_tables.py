"""The stage tables of :mod:`.search`'s search: per stage and pattern, the products of its cells'
compositions (:mod:`.stage_cells`) a cap lets through, priced.

A stage's *content* is one composition per cell. It is priced at the
least backward cap that fits the memory limit (:mod:`.cap_search`, a
search over the cells' backward values), and per layers of each kind only
while it could beat the best content found (:func:`stage_table`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import cap_search
from ..cells import COMBO_BUDGET, EPS, Cache
from ..segments import within
from ...setup import BalanceSetup
from ..stage_bounds import fixed_memory, floor_weights
from .stage_cells import Cell, cells_of, counts_of, stage_key

__all__ = ["StageTable", "stage_table"]


# ------------------------------------------------------------------ stage tables


@dataclass(frozen=True)
class StageTable:
    """One stage under one pattern: per layers ``(n0, n1)`` the best value and its content, with relaxed and
    with exact memory; a content is the cells' compositions (``contents``) with the backward cap and the
    working-set group of its exact pricing."""

    relaxed: np.ndarray  # [n0, n1] value
    exact: np.ndarray
    relaxed_pick: np.ndarray  # [n0, n1] content index
    exact_pick: np.ndarray
    contents: np.ndarray  # [content, chunk] composition index per cell
    beta: np.ndarray  # [content, chunk] the cells' backward caps in the exact pricing
    group: np.ndarray  # [content] the cells' working-set groups in the exact pricing (an index into their product)
    cells: list[Cell]


def _contents(setup: BalanceSetup, cells: list[Cell], s: int, cap: float, measure: str):
    """Every product of the cells' compositions within the layer counts and under ``cap`` at its least
    (:func:`_least_value` with every cell on its fastest point; or memory), as composition indices per cell,
    with its layers of each kind, the largest of the cells' terms and every cell's fastest backward."""
    n0, n1 = counts_of(setup)
    contents = np.zeros((1, 0), dtype=int)
    layers, forward, fastest = np.zeros((1, 2), dtype=int), np.zeros(1), np.zeros((1, 0))
    memory = np.full(1, fixed_memory(setup, s))
    limit = setup.memory_mb if measure != "memory" else cap
    flights, charges = floor_weights(setup, s)
    for c, cell in enumerate(cells):
        quickest = cell.quickest
        held = np.where(np.isfinite(cell.lightest), flights[c] * cell.lightest, np.inf)  # no 0 * inf for no group
        lightest = (held + charges[c] * cell.working[None, :]).min(axis=1, initial=np.inf)
        left = np.repeat(np.arange(len(contents)), len(cell.kept))
        right = np.tile(np.arange(len(cell.kept)), len(contents))
        new_layers = layers[left] + cell.layers[right]
        new_forward = np.maximum(forward[left], cell.forward[right])
        new_fastest = np.column_stack([fastest[left], quickest[right]])
        new_memory = memory[left] + cell.kept[right] + lightest[right]
        keep = (new_layers[:, 0] <= n0) & (new_layers[:, 1] <= n1) & within(new_memory, limit)
        if measure != "memory":
            keep &= within(_least_value(setup, new_forward, new_fastest, measure), cap)
        if keep.sum() > COMBO_BUDGET:
            return None
        contents = np.column_stack([contents[left[keep]], right[keep]])
        layers, forward, fastest, memory = new_layers[keep], new_forward[keep], new_fastest[keep], new_memory[keep]
    return contents, layers, forward, fastest


def _least_value(setup: BalanceSetup, forward: np.ndarray, fastest: np.ndarray, measure: str) -> np.ndarray:
    """The least a content (its cells so far) can add to the objective with every cell at least as slow as
    ``fastest``: its stage time, or under the split objective ``S + max(L, S)`` of this stage alone."""
    if measure == "time":
        return forward + fastest.max(axis=1)
    first = np.maximum(fastest[:, : setup.chunks - 1].max(axis=1, initial=0.0), 0.0)
    last = forward + (fastest[:, -1] if fastest.shape[1] == setup.chunks else 0.0)
    return first + np.maximum(last, first)


def stage_table(setup: BalanceSetup, cache: Cache, s: int, pattern: tuple, cap: float, measure: str,
                 sigma: float | None = None, priced: bool = True) -> StageTable | None:
    """The stage's contents under ``cap``, priced at their least stage time that fits (``"time"``), their
    least ``L`` that fits with every other chunk's backward within ``sigma`` (``"split"``) or their least
    memory (``"memory"``); unpriced (``priced=False``), at their least value (:func:`_least_value`) whatever
    their memory beyond their lightest point's; None past :data:`~sappkit.balancer.exact.cells.COMBO_BUDGET`."""
    cache.check_time()
    key = stage_key(setup, "table", measure, s, pattern, round(cap, 9), sigma, priced)
    if key in cache.stages:
        return cache.stages[key]
    cells = cells_of(setup, cache, s, pattern, cap, measure)
    listed_key = stage_key(setup, "contents", measure, s, pattern, round(cap, 9))
    if listed_key not in cache.stages:
        cache.stages[listed_key] = _contents(setup, cells, s, cap, measure)
    listed = cache.stages[listed_key]
    if listed is None:
        return None
    contents, layers, forward, fastest = listed
    shape = tuple(n + 1 for n in counts_of(setup))
    if not priced:
        least = _least_value(setup, forward, fastest, measure)
        best, pick = _best_per_layers(layers, least, np.ones(len(contents), bool), shape)
        table = StageTable(best, best, pick, pick, contents, np.full(contents.shape, np.inf),
                           np.zeros(len(contents), int), cells)
        cache.stages[key] = table
        return table
    if measure == "memory":
        beta = np.full(contents.shape, np.inf)
        relaxed, exact, group = cap_search.priced(setup, cells, s, contents, beta)
        everything = np.ones(len(contents), bool)
        tables = [_best_per_layers(layers, mb, everything, shape) for mb in (relaxed, exact)]
    else:
        if sigma is None:  # caps priced under a smaller cap on the stage time hold under this one
            tried, bracket = None, (None, None)
            known = cache.stages.setdefault(stage_key(setup, "priced", s, pattern), {})
        else:  # caps priced at other bounds on S bracket these
            tried = cache.stages.setdefault(stage_key(setup, "sigmas", s, pattern, round(cap, 9)), {})
            bracket, known = _bracket(tried, sigma), None
        pricing = _Pricing.of(setup, cells, forward, fastest, sigma)
        values, beta, group, index = _fastest_that_fit(setup, cells, s, contents, layers, pricing, bracket, known)
        tables = [_best_per_layers(layers, value, np.isfinite(value), shape) for value in values]
        if tried is not None:
            tried[sigma] = index
    table = StageTable(tables[0][0], tables[1][0], tables[0][1], tables[1][1], contents, beta, group, cells)
    cache.stages[key] = table
    return table


def _bracket(tried: dict, sigma: float):
    """The relaxed pricing's grid indices at the nearest larger and smaller ``sigma`` tried (None where none):
    a content's least cap never grows with ``sigma``, so they bound it from below and above."""
    above = [t for t in tried if t > sigma]
    below = [t for t in tried if t < sigma]
    return tried[min(above)] if above else None, tried[max(below)] if below else None


@dataclass(frozen=True)
class _Pricing:
    """How a table prices its contents: the cells whose backward cap is searched (one cap shared) and their
    indices among the stage's, each content's least such cap, the cells' caps for a searched cap (``caps``),
    what a content's value adds to its searched cap (``offset``), and the contents taking part."""

    cells: list[Cell]
    searched: range  # the cells' indices among the stage's
    least: np.ndarray
    caps: object
    offset: np.ndarray
    part: np.ndarray

    @staticmethod
    def of(setup: BalanceSetup, cells: list[Cell], forward: np.ndarray, fastest: np.ndarray,
           sigma: float | None) -> _Pricing:
        """The stage time (``sigma`` None: every cell's cap plus the forward), or ``L`` (the last cell's cap plus
        its term, the others' caps ``sigma``)."""
        if sigma is None:
            return _Pricing(cells, range(len(cells)), fastest.max(axis=1),
                            lambda beta: np.repeat(beta[:, None], setup.chunks, axis=1), forward,
                            np.ones(len(forward), bool))
        return _Pricing(cells[-1:], range(len(cells) - 1, len(cells)), fastest[:, -1],
                        lambda beta: np.column_stack([np.full((len(beta), setup.chunks - 1), sigma), beta]),
                        forward, within(fastest[:, :-1].max(axis=1, initial=-np.inf), sigma))


def _codes(setup: BalanceSetup, cells: list[Cell], contents: np.ndarray) -> np.ndarray | None:
    """One integer per content naming its cells' layers of each kind, the same under every cap (None where
    they would not fit in 62 bits)."""
    radix = max(counts_of(setup)) + 1
    if radix ** (2 * len(cells)) >= 2**62:
        return None
    digits = np.concatenate([cell.layers[contents[:, c]] for c, cell in enumerate(cells)], axis=1)
    return digits @ radix ** np.arange(digits.shape[1], dtype=np.int64)


def _fastest_that_fit(setup, cells, s, contents, layers, pricing: _Pricing, bracket=(None, None), known=None):
    """Per content its least value that fits (relaxed and exact memory), the cells' backward caps and groups,
    and the relaxed value's index into the cap grid (-1 where not priced); inf where none fits or where
    another content of the same layers is known to be as fast: contents are priced in rounds, each group's
    fastest-bounded first, until none left could beat its group's best.

    The value is the searched cap plus the pricing's offset (:class:`_Pricing`); ``bracket`` holds the
    indices priced at a larger and a smaller ``sigma`` (:func:`_bracket`). ``known`` maps a
    content's code (:func:`_codes`) to its least relaxed and exact caps, priced under a smaller cap on the stage
    time: they need no search again, and it is updated."""
    offset, caps = pricing.offset, pricing.caps
    searched = pricing.cells
    grid = searched[0].grid if len(searched) == 1 else np.unique(np.concatenate([cell.grid for cell in searched]))
    low = cap_search.index_of(grid, pricing.least)
    above, below = bracket
    high = np.full(len(contents), len(grid))
    if above is not None:  # what did not fit at a larger sigma does not fit here
        low = np.maximum(low, above)
    if below is not None:  # what fitted at a smaller sigma fits here
        high = np.where(below >= 0, np.maximum(below, low), high)
    exact_low, exact_high = low.copy(), np.full(len(contents), len(grid))
    codes = None if known is None else _codes(setup, cells, contents)
    if codes is not None:
        remembered = np.array([known.get(code, (np.nan, np.nan)) for code in codes.tolist()]).reshape(-1, 2)
        seen = ~np.isnan(remembered[:, 0])
        for lo, hi, cap in ((low, high, remembered[:, 0]), (exact_low, exact_high, remembered[:, 1])):
            lo[seen] = hi[seen] = cap_search.index_of(grid, cap[seen])
    bound = np.where((low < len(grid)) & pricing.part, offset + grid[np.minimum(low, len(grid) - 1)], np.inf)
    key = layers[:, 0] * (counts_of(setup)[1] + 1) + layers[:, 1]
    order = np.lexsort((bound, key))
    best = np.full(int(key.max(initial=0)) + 1, np.inf)
    values = [np.full(len(contents), np.inf), np.full(len(contents), np.inf)]
    beta, group = np.full(contents.shape, np.inf), np.zeros(len(contents), dtype=int)
    waiting = np.ones(len(contents), bool)
    priced = np.full(len(contents), -1)
    width = 1
    while True:
        ready = order[waiting[order] & np.isfinite(bound[order])]
        open_ = ready[bound[ready] < best[key[ready]] - EPS * np.maximum(1.0, bound[ready])]
        if not open_.size:
            return values, beta, group, priced
        starts = np.flatnonzero(np.r_[True, key[open_][1:] != key[open_][:-1]])
        rank = np.arange(len(open_)) - np.repeat(starts, np.diff(np.r_[starts, len(open_)]))
        batch = open_[rank < width]  # each group's least bounds, more every round
        width *= 2
        waiting[batch] = False
        index, exact_index, found = cap_search.least_caps(setup, cells, s, contents[batch], grid, low[batch],
                                                          high[batch], caps, pricing.searched, exact_low[batch],
                                                          exact_high[batch])
        priced[batch] = index
        if codes is not None:
            known.update(zip(codes[batch].tolist(), zip(_caps_at(grid, index).tolist(),
                                                        _caps_at(grid, exact_index).tolist())))
        for which, found_index in ((0, index), (1, exact_index)):
            values[which][batch] = offset[batch] + _caps_at(grid, found_index)
        beta[batch] = caps(values[1][batch] - offset[batch])
        unknown = (found < 0) & (exact_index < len(grid))  # met without a probe (a remembered cap): price it
        found[unknown] = cap_search.priced(setup, cells, s, contents[batch][unknown], beta[batch][unknown])[2]
        group[batch] = np.maximum(found, 0)
        np.minimum.at(best, key[batch], values[1][batch])


def _caps_at(grid: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The caps at ``index`` into ``grid`` (inf past its end)."""
    return np.where(index < len(grid), grid[np.minimum(index, len(grid) - 1)], np.inf)


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
