"""What a stage may hold for :mod:`.boundary`'s search: cells as staircases per composition, the products
of their compositions a cap lets through, and the stage tables that price them.

A cell's *composition* is its layers of each body kind. Its contents are
points of the composition's front (:func:`~sappkit.balancer.segments.run_front`);
for a backward cap ``beta`` the lightest point under it is all memory
needs (memory grows with every cell's activation and charged working set;
a charged cell keeps one such staircase per working set). A stage's
*content* is one composition per cell, priced at the least cap that fits
the memory limit, by bisection (:func:`stage_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .cells import COMBO_BUDGET, EPS, Cache, Front, charged_chunks, fixed_memory, floor_weights, memory_bounds
from .segments import per_kind, run_front, within
from .setup import V_SHAPED, BalanceSetup

__all__ = ["Cell", "StageTable", "cells_of", "counts_of", "stage_table"]


# ------------------------------------------------------------------ what a cell may hold


@dataclass(frozen=True)
class Cell:
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


def counts_of(setup: BalanceSetup) -> tuple[int, int]:
    """Layers of each body kind, ``(n, 0)`` with one kind: the search always counts two."""
    return int(setup.counts[0]), int(setup.counts[1]) if len(setup.kinds) == 2 else 0


def _per_kind(setup: BalanceSetup, values: np.ndarray) -> np.ndarray:
    """:func:`~sappkit.balancer.segments.per_kind` for the two kinds :func:`counts_of` counts."""
    return np.r_[per_kind(setup, values), np.zeros(2 - len(setup.kinds))]


def _term(setup: BalanceSetup, c: int, s: int, measure: str) -> tuple[np.ndarray, float]:
    """What cell ``(c, s)`` adds to its stage's value beside its backward, per layer of each kind and fixed:
    its forward (the stage time takes the largest), or under the split objective the last chunk's ``Fht + f_s
    / m * Fbody`` of ``L`` (0 on the other chunks)."""
    forward = _per_kind(setup, setup.forward)
    if measure != "split":
        return forward, float(setup.fixed_forward[c, s])
    if c < setup.chunks - 1:
        return np.zeros_like(forward), 0.0
    return setup.last_chunk_factors[s] / setup.slices * forward, float(setup.fixed_forward[c, s])


def _compositions(setup: BalanceSetup, c: int, s: int, holds) -> list[tuple[int, int]]:
    """Layers of each kind the cell may hold: ``holds`` is 0 or 1 (one kind), or ``"both"`` (the boundary
    cell: at least one layer of the first kind, the second's only where the cell may hold both)."""
    n0, n1 = counts_of(setup)
    if holds == "both":
        second = range(n1 + 1) if not (setup.schedule in V_SHAPED and c == 1) else range(1)
        return [(a, b) for a in range(1, n0 + 1) for b in second]
    low = 0 if (c, s) in setup.reserved else 1
    return [(n, 0) if holds == 0 else (0, n) for n in range(low, (n0, n1)[holds] + 1)]


def _staircases(cache: Cache, front: Front, key: tuple) -> dict:
    """Per working set of ``front`` (the run front :func:`_cell` takes for ``key``): its points by backward
    ascending, the least activation up to each, and the point giving it; cached."""
    key = ("staircases", *key)
    if key not in cache.fronts:
        stairs = {}
        for w in np.unique(front.charged()):
            members = np.flatnonzero(front.charged() == w)
            members = members[np.argsort(front.backward[members], kind="stable")]
            least = np.minimum.accumulate(front.activation[members])
            newest = np.maximum.accumulate(np.where(front.activation[members] <= least, np.arange(len(members)), 0))
            stairs[float(w)] = (front.backward[members], least, members[newest])
        cache.fronts[key] = stairs
    return cache.fronts[key]


@dataclass(frozen=True)
class _Catalogue:
    """Every composition cell ``(c, s)`` may hold, whatever the cap: its term (:func:`_term`), memory kept once,
    least value (term + least backward) and a lower bound on its stage's memory, and per composition built so
    far its least stage memory (nan until built) with its front and staircases (``built``)."""

    layers: np.ndarray  # [composition, kind]
    term: np.ndarray
    kept: np.ndarray
    least_value: np.ndarray
    bound_mb: np.ndarray
    least_mb: np.ndarray
    built: dict


def _catalogue(setup: BalanceSetup, cache: Cache, c: int, s: int, holds, measure: str) -> _Catalogue:
    """Cell ``(c, s)``'s :class:`_Catalogue`, cached for every memory limit: what a cap only filters."""
    key = ("boundary", "catalogue", measure, c, s, holds)
    if key not in cache.stages:
        layers = np.array(_compositions(setup, c, s, holds), dtype=int).reshape(-1, 2)
        term_per, term_fixed = _term(setup, c, s, measure)
        term = layers @ term_per + term_fixed
        kept = layers @ _per_kind(setup, setup.param + setup.once)
        flight = floor_weights(setup, s)[0][c]
        bound_mb = fixed_memory(setup, s) + kept + flight * (layers @ _per_kind(setup, setup.activation))
        least_value = term + layers @ _per_kind(setup, setup.backward) + setup.fixed_backward[c, s]
        cache.stages[key] = _Catalogue(layers, term, kept, least_value, bound_mb, np.full(len(layers), np.nan), {})
    return cache.stages[key]


def _build(setup: BalanceSetup, cache: Cache, catalogue: _Catalogue, c: int, s: int, measure: str,
           compositions: np.ndarray) -> None:
    """Build the fronts of ``compositions`` (indices into ``catalogue``) and record their least stage memory."""
    charge = c in charged_chunks(setup, s)
    flight, charged = (weights[c] for weights in floor_weights(setup, s))
    floor = fixed_memory(setup, s)
    for k in compositions.tolist():
        composition = tuple(int(n) for n in catalogue.layers[k])
        front = run_front(setup, composition, cache, working=charge, lightest=measure == "memory")
        catalogue.least_mb[k] = floor + catalogue.kept[k] + (flight * front.activation + charged
                                                             * front.charged()).min()
        catalogue.built[k] = (front, _staircases(cache, front, (composition, charge, measure == "memory")))


def _cell(setup: BalanceSetup, cache: Cache, c: int, s: int, holds, cap: float, measure: str) -> Cell:
    """The compositions of cell ``(c, s)`` that may stay under ``cap`` (``"time"``: their least forward +
    backward; ``"split"``: their least backward within ``cap / 2`` on a chunk but the last, their least ``L``
    term within ``cap`` on the last; ``"memory"``: their least memory on an otherwise empty stage), with their
    fronts and ``forward``, what they add to the stage's value beside the backward (:func:`_term`)."""
    catalogue = _catalogue(setup, cache, c, s, holds, measure)
    limit = setup.memory_mb if measure != "memory" else cap
    room = cap / 2 if measure == "split" and c < setup.chunks - 1 else cap
    wanted = within(catalogue.bound_mb, limit)  # no point of a front past it fits: never built
    if measure != "memory":
        wanted &= within(catalogue.least_value, room)
    _build(setup, cache, catalogue, c, s, measure, np.flatnonzero(wanted & np.isnan(catalogue.least_mb)))
    chosen = np.flatnonzero(wanted & within(np.nan_to_num(catalogue.least_mb, nan=np.inf), limit))
    rows = [catalogue.built[k] for k in chosen.tolist()]
    groups = np.unique(np.concatenate([front.charged() for front, _ in rows] + [np.zeros(0 if rows else 1)]))
    width = max([len(front.backward) for front, _ in rows], default=1)
    shape = (len(rows), len(groups), width)
    backward, activation, point = np.full(shape, np.inf), np.full(shape, np.inf), np.full(shape, -1)
    fixed_backward = setup.fixed_backward[c, s]
    for k, (_, stairs) in enumerate(rows):
        for w, (steps_backward, steps_activation, steps_point) in stairs.items():
            g, n = int(np.searchsorted(groups, w)), len(steps_backward)
            backward[k, g, :n], activation[k, g, :n], point[k, g, :n] = steps_backward + fixed_backward, \
                steps_activation, steps_point
    return Cell(catalogue.layers[chosen], catalogue.term[chosen], catalogue.kept[chosen], backward, activation,
                point, groups, [front for front, _ in rows])


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
        quickest = cell.backward[:, :, 0].min(axis=1)
        lightest = (flights[c] * cell.activation.min(axis=-1) + charges[c] * cell.working[None, :]).min(axis=1)
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


def _priced(setup: BalanceSetup, cells: list[Cell], s: int, contents: np.ndarray, beta: np.ndarray):
    """Relaxed and exact stage memory of the contents with every cell on its lightest point of backward <=
    ``beta`` (per content and cell), each the least over the cells' working-set groups, and the exact one's
    groups (one index into their product).

    Memory grows with a cell's activation and its charged working set, so per content only the groups lighter
    than every group of a smaller working set are priced (groups ascend by working set): about two per cell
    where a cell keeps four to eight."""
    rows = len(contents)
    options, kept = [], np.zeros(rows)
    for c, cell in enumerate(cells):
        least, _ = cell.least_activation(contents[:, c], beta[:, c])
        useful = least < np.minimum.accumulate(np.c_[np.full(rows, np.inf), least[:, :-1]], axis=1)
        order = np.argsort(~useful, axis=1, kind="stable")[:, : max(1, int(useful.sum(axis=1).max(initial=0)))]
        options.append((np.where(np.take_along_axis(useful, order, axis=1), np.take_along_axis(least, order, axis=1),
                                 np.inf), cell.working[order], order))
        kept += cell.kept[contents[:, c]]
    sizes = [activation.shape[1] for activation, _, _ in options]
    picks = np.array(np.unravel_index(np.arange(int(np.prod(sizes))), sizes)).T  # [combination, chunk]
    activation = np.stack([a[:, picks[:, c]] for c, (a, _, _) in enumerate(options)], axis=2)
    working = np.stack([w[:, picks[:, c]] for c, (_, w, _) in enumerate(options)], axis=2)
    flat = activation.reshape(-1, setup.chunks)
    finite = np.isfinite(flat).all(axis=1)
    relaxed, exact = memory_bounds(setup, s, np.zeros_like(flat), np.where(finite[:, None], flat, 0.0),
                                   working.reshape(-1, setup.chunks))
    relaxed = np.where(finite, relaxed, np.inf).reshape(rows, len(picks)) + kept[:, None]
    exact = np.where(finite, exact, np.inf).reshape(rows, len(picks)) + kept[:, None]
    chosen = exact.argmin(axis=1)
    groups = [order[np.arange(rows), picks[chosen, c]] for c, (_, _, order) in enumerate(options)]
    group = np.ravel_multi_index(groups, [len(cell.working) for cell in cells]) if cells else np.zeros(rows, int)
    return relaxed.min(axis=1), exact.min(axis=1), group


#: Caps probed per content at once by :func:`_least_caps`: each round narrows a content's interval
#: ``_PROBES``-fold, and costs about what one probe does (the pricing is numpy overhead at these sizes).
_PROBES = 8


def _least_caps(setup, cells, s, contents, grid, low, high, caps, exact_low=None, exact_high=None):
    """Per content the least indices into ``grid`` whose backward cap (the cells' caps ``caps(cap)``) lets the
    stage fit the memory limit, relaxed and exact (``len(grid)`` where none does), and the exact pricing's
    working-set groups at the latter (-1 where no probe met it).

    The relaxed answer lies in ``[low, high]``, the exact one in ``[exact_low, exact_high]`` (by default
    ``[low, len(grid)]``); memory falls as the cap grows and the exact is never below the relaxed, so one
    search over the grid, :data:`_PROBES` probes a round from the lower end, narrows both."""
    n = len(grid)
    lo_r, hi_r = low.copy(), high.copy()
    lo_e = low.copy() if exact_low is None else exact_low.copy()
    hi_e = np.full(len(contents), n) if exact_high is None else exact_high.copy()
    group = np.full(len(contents), -1)
    while True:
        lo_e, hi_r = np.maximum(lo_e, lo_r), np.minimum(hi_r, hi_e)
        relaxed_open = lo_r < hi_r
        active = np.flatnonzero(relaxed_open | (lo_e < hi_e))
        if not active.size:
            return lo_r, lo_e, group
        start = np.where(relaxed_open, lo_r, lo_e)[active]
        span = np.where(relaxed_open, hi_r, hi_e)[active] - start
        probes = start[:, None] + (span[:, None] * np.arange(_PROBES)[None, :]) // _PROBES
        relaxed, exact, groups = _priced(setup, cells, s, contents[np.repeat(active, _PROBES)],
                                         caps(grid[probes.ravel()]))
        _narrow(lo_r, hi_r, active, probes, within(relaxed, setup.memory_mb).reshape(-1, _PROBES))
        met, column = _narrow(lo_e, hi_e, active, probes, within(exact, setup.memory_mb).reshape(-1, _PROBES))
        group[active[met]] = groups.reshape(-1, _PROBES)[met, column[met]]


def _narrow(lo, hi, active, probes, fits) -> tuple[np.ndarray, np.ndarray]:
    """Narrow the ``active`` rows' intervals ``[lo, hi]`` in place by their probes' fits: the least probe that
    fits bounds the answer from above, the greatest that does not from below. Returns where the upper end
    moved to a probe, and that probe's column."""
    rows = np.arange(len(active))
    column = np.where(fits, probes, np.iinfo(probes.dtype).max).argmin(axis=1)
    met = fits[rows, column] & (probes[rows, column] < hi[active])
    hi[active] = np.where(met, probes[rows, column], hi[active])
    lo[active] = np.maximum(lo[active], np.where(fits, 0, probes + 1).max(axis=1))
    return met, column


def _key(setup: BalanceSetup, *parts) -> tuple:
    """A key into the cache's stage entries: what the search keeps depends on the memory limit, which a cache
    outlives (:class:`~sappkit.balancer.cells.Cache` serves every limit of one instance)."""
    return ("boundary", setup.memory_mb, *parts)


def cells_of(setup: BalanceSetup, cache: Cache, s: int, pattern: tuple, cap: float, measure: str) -> list[Cell]:
    """Stage ``s``'s cells under ``pattern`` and ``cap`` (:func:`_cell`), cached."""
    cells = []
    for c, holds in enumerate(pattern):
        key = _key(setup, "cell", measure, c, s, holds, round(cap, 9))
        if key not in cache.stages:
            cache.stages[key] = _cell(setup, cache, c, s, holds, cap, measure)
        cells.append(cache.stages[key])
    return cells


def stage_table(setup: BalanceSetup, cache: Cache, s: int, pattern: tuple, cap: float, measure: str,
                 sigma: float | None = None) -> StageTable | None:
    """The stage's contents under ``cap``, priced at their least stage time that fits (``"time"``), their
    least ``L`` that fits with every other chunk's backward within ``sigma`` (``"split"``) or their least
    memory (``"memory"``); None past :data:`~sappkit.balancer.cells.COMBO_BUDGET`."""
    key = _key(setup, "table", measure, s, pattern, round(cap, 9), sigma)
    if key in cache.stages:
        return cache.stages[key]
    cells = cells_of(setup, cache, s, pattern, cap, measure)
    listed_key = _key(setup, "contents", measure, s, pattern, round(cap, 9))
    if listed_key not in cache.stages:
        cache.stages[listed_key] = _contents(setup, cells, s, cap, measure)
    listed = cache.stages[listed_key]
    if listed is None:
        return None
    contents, layers, forward, fastest = listed
    shape = tuple(n + 1 for n in counts_of(setup))
    if measure == "memory":
        beta = np.full(contents.shape, np.inf)
        relaxed, exact, group = _priced(setup, cells, s, contents, beta)
        everything = np.ones(len(contents), bool)
        tables = [_best_per_layers(layers, mb, everything, shape) for mb in (relaxed, exact)]
    else:
        if sigma is None:  # caps priced under a smaller cap on the stage time hold under this one
            tried, bracket = None, (None, None)
            known = cache.stages.setdefault(_key(setup, "priced", s, pattern), {})
        else:  # caps priced at other bounds on S bracket these
            tried = cache.stages.setdefault(_key(setup, "sigmas", s, pattern, round(cap, 9)), {})
            bracket, known = _bracket(tried, sigma), None
        values, beta, group, index = _fastest_that_fit(setup, cells, s, contents, layers, forward, fastest, sigma,
                                                       bracket, known)
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


def _codes(setup: BalanceSetup, cells: list[Cell], contents: np.ndarray) -> np.ndarray | None:
    """One integer per content naming its cells' layers of each kind, the same under every cap (None where
    they would not fit in 62 bits)."""
    radix = max(counts_of(setup)) + 1
    if radix ** (2 * len(cells)) >= 2**62:
        return None
    digits = np.concatenate([cell.layers[contents[:, c]] for c, cell in enumerate(cells)], axis=1)
    return digits @ radix ** np.arange(digits.shape[1], dtype=np.int64)


def _fastest_that_fit(setup, cells, s, contents, layers, forward, fastest, sigma=None, bracket=(None, None),
                      known=None):
    """Per content its least value that fits (relaxed and exact memory), the cells' backward caps and groups,
    and the relaxed value's index into the cap grid (-1 where not priced); inf where none fits or where
    another content of the same layers is known to be as fast: contents are priced in rounds, each group's
    fastest-bounded first, until none left could beat its group's best.

    The value is ``forward`` plus one backward cap on every cell (the stage time), or with ``sigma`` (the
    split objective) plus the last cell's cap, every other cell's cap being ``sigma``; ``bracket`` holds the
    indices priced at a larger and a smaller ``sigma`` (:func:`_bracket`). ``known`` maps a content's code
    (:func:`_codes`) to its least relaxed cap, priced under a smaller cap on the stage time: it needs no
    bisection again, and it is updated."""
    if sigma is None:
        priced_cells, least = cells, fastest.max(axis=1)

        def caps(beta):
            return np.broadcast_to(beta[:, None], (len(beta), setup.chunks))
    else:
        priced_cells, least = cells[-1:], fastest[:, -1]

        def caps(beta):
            return np.column_stack([np.full((len(beta), setup.chunks - 1), sigma), beta])
    grid = np.unique(np.concatenate([cell.backward[np.isfinite(cell.backward)] for cell in priced_cells] + [[0.0]]))
    low = _index_of(grid, least)
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
            lo[seen] = hi[seen] = _index_of(grid, cap[seen])
    bound = np.where(low < len(grid), forward + grid[np.minimum(low, len(grid) - 1)], np.inf)
    if sigma is not None:  # a content whose other cells cannot stay within sigma takes no part
        bound = np.where(within(fastest[:, :-1].max(axis=1, initial=-np.inf), sigma), bound, np.inf)
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
        index, exact_index, found = _least_caps(setup, cells, s, contents[batch], grid, low[batch], high[batch], caps,
                                                exact_low[batch], exact_high[batch])
        priced[batch] = index
        if codes is not None:
            known.update(zip(codes[batch].tolist(), zip(_caps_at(grid, index).tolist(),
                                                        _caps_at(grid, exact_index).tolist())))
        for which, found_index in ((0, index), (1, exact_index)):
            values[which][batch] = forward[batch] + _caps_at(grid, found_index)
        beta[batch] = caps(values[1][batch] - forward[batch])
        unknown = (found < 0) & (exact_index < len(grid))  # met without a probe (a remembered cap): price it
        found[unknown] = _priced(setup, cells, s, contents[batch][unknown], beta[batch][unknown])[2]
        group[batch] = np.maximum(found, 0)
        np.minimum.at(best, key[batch], values[1][batch])


def _index_of(grid: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Per cap, the index of the least grid value not below it (``len(grid)`` past the end, for inf too)."""
    finite = np.isfinite(caps)
    safe = np.where(finite, caps, 0.0)
    return np.where(finite, np.searchsorted(grid, safe - EPS * np.maximum(1.0, np.abs(safe))), len(grid))


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
