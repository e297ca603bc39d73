"""A stage content's least backward cap that fits the memory limit: its memory at given caps, and the search
over caps that :mod:`.stage_tables` and the split objective's search (:mod:`.split_search`) price with.

A content (one composition per cell) at backward caps holds every cell on
its lightest point under its cap, in the working-set groups that give the
least memory (:func:`priced`). Memory falls as a cap grows, so the least cap
that fits is a search over a grid of caps (:func:`least_caps`), a few probes
a round; where one cell's cap is searched and the others held, the stage's
memory inverted in that cell gives the answer first, and the probes check
it.
"""

from __future__ import annotations

import numpy as np

from ..cells import EPS
from ..segments import within
from ...setup import BalanceSetup
from ..stage_bounds import activation_room, memory_bounds
from .stage_cells import Cell

__all__ = ["index_of", "least_caps", "least_shared_cap", "priced"]


def _groups(cell: Cell, composition: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, the cell's working-set groups worth pricing at backward cap ``beta``: their least activation
    (inf padded), working set and index.

    Memory grows with a cell's activation and its charged working set, so only the groups lighter than every
    group of a smaller working set count (groups ascend by working set): about two where a cell keeps four to
    eight."""
    least, _ = cell.least_activation(composition, beta)
    every = np.arange(len(least))[:, None]
    lighter = np.full_like(least, np.inf)  # the least activation of every smaller working set
    lighter[:, 1:] = np.minimum.accumulate(least[:, :-1], axis=1)
    useful = least < lighter
    order = np.argsort(~useful, axis=1, kind="stable")[:, : max(1, int(useful.sum(axis=1).max(initial=0)))]
    return np.where(useful[every, order], least[every, order], np.inf), cell.working[order], order


def priced(setup: BalanceSetup, cells: list[Cell], s: int, contents: np.ndarray, beta: np.ndarray,
            held: list | None = None):
    """Relaxed and exact stage memory of the contents with every cell on its lightest point of backward <=
    ``beta`` (per content and cell), each the least over the cells' working-set groups (:func:`_groups`; a
    cell's given in ``held`` where not None), and the exact one's groups (one index into their product)."""
    rows = len(contents)
    if not rows:
        return np.zeros(0), np.zeros(0), np.zeros(0, int)
    options = [held[c] if held is not None and held[c] is not None else _groups(cell, contents[:, c], beta[:, c])
               for c, cell in enumerate(cells)]
    kept, picks, flat, working, finite = _products(cells, contents, options)
    relaxed, exact = memory_bounds(setup, s, np.zeros_like(flat), flat, working)
    relaxed = np.where(finite, relaxed, np.inf).reshape(rows, len(picks)) + kept[:, None]
    exact = np.where(finite, exact, np.inf).reshape(rows, len(picks)) + kept[:, None]
    chosen = exact.argmin(axis=1)
    groups = [order[np.arange(rows), picks[chosen, c]] for c, (_, _, order) in enumerate(options)]
    group = np.ravel_multi_index(groups, [len(cell.working) for cell in cells])
    return relaxed.min(axis=1), exact.min(axis=1), group


#: Caps probed per content at once by :func:`least_caps`: each round narrows a content's interval
#: ``_PROBES``-fold, and costs little more than one probe does (the pricing is mostly numpy overhead at these
#: sizes). Six rather than eight: the VLM at v = 3 prices three cells' group products, where eight cost more.
_PROBES = 6


def least_caps(setup, cells, s, contents, grid, low, high, caps, searched, exact_low=None, exact_high=None):
    """Per content the least indices into ``grid`` whose backward cap (the cells' caps ``caps(cap)``; those of
    the cells not ``searched`` the same for every cap) lets the stage fit the memory limit, relaxed and exact
    (``len(grid)`` where none does), and the exact pricing's working-set groups at the latter (-1 where no probe
    met it).

    The relaxed answer lies in ``[low, high]``, the exact one in ``[exact_low, exact_high]`` (by default
    ``[low, len(grid)]``); memory falls as the cap grows and the exact is never below the relaxed, so one
    search over the grid, :data:`_PROBES` probes a round from the lower end, narrows both. Where only the last
    cell's cap is searched, the first round probes its guess (:func:`_guess`) and the cap below it."""
    n = len(grid)
    fixed = caps(grid[np.minimum(low, n - 1)])
    held = [None if c in searched else _groups(cell, contents[:, c], fixed[:, c]) for c, cell in enumerate(cells)]
    guess = _guess(setup, cells, s, contents, held, grid) if list(searched) == [len(cells) - 1] else None
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
        if guess is None:
            probes = start[:, None] + (span[:, None] * np.arange(_PROBES)[None, :]) // _PROBES
        else:  # the guess and the cap just below it: where it is right, one round closes the search
            probes = np.clip(guess[active, None] + np.array([-1, 0]), start[:, None], (start + span - 1)[:, None])
            guess = None
        width = probes.shape[1]
        rows = np.repeat(active, width)
        relaxed, exact, groups = priced(setup, cells, s, contents[rows], caps(grid[probes.ravel()]),
                                         [None if h is None else tuple(part[rows] for part in h) for h in held])
        _narrow(lo_r, hi_r, active, probes, within(relaxed, setup.memory_mb).reshape(-1, width))
        met, column = _narrow(lo_e, hi_e, active, probes, within(exact, setup.memory_mb).reshape(-1, width))
        group[active[met]] = groups.reshape(-1, width)[met, column[met]]


def least_shared_cap(setup: BalanceSetup, cells: list[Cell], s: int, content: np.ndarray, last_cap: float,
                     top: float) -> tuple[float, np.ndarray, int]:
    """The least backward cap, at most ``top`` (where the content fits), of every cell of a stage ``content``
    (its compositions) but the last, with the last's ``last_cap``, that lets the stage fit with exact memory;
    with the cells' caps there and the working-set groups of that pricing (an index into their product).
    Memory changes only at the cells' own steps, so they are the caps searched."""
    chunks, row = setup.chunks, content[None, :]

    def caps(values):
        return np.column_stack([np.repeat(values[:, None], chunks - 1, axis=1), np.full(len(values), last_cap)])

    grid = np.unique(np.r_[[top], *(cell.steps(int(row[0, c])) for c, cell in enumerate(cells[:-1]))])
    grid = grid[within(grid, top)]
    high = np.array([len(grid) - 1])
    _, index, group = least_caps(setup, cells, s, row, grid, np.zeros(1, int), high, caps, range(chunks - 1),
                                  np.zeros(1, int), high)
    beta = caps(grid[index])
    if group[0] < 0:  # met without a probe
        group = priced(setup, cells, s, row, beta)[2]
    return float(grid[index[0]]), beta[0], int(group[0])


def _products(cells: list[Cell], contents: np.ndarray, options: list):
    """Every product of the cells' working-set ``options`` (per cell: activation, working set and group index,
    ``[row, option]``): the contents' kept memory, the products' picks ``[combination, chunk]``, and per row and
    combination (flat, row-major) the cells' activations (0 where one is inf), working sets and whether every
    activation is finite."""
    kept = sum(cell.kept[contents[:, c]] for c, cell in enumerate(cells))
    sizes = [activation.shape[1] for activation, _, _ in options]
    picks = np.array(np.unravel_index(np.arange(int(np.prod(sizes))), sizes)).T
    activation = np.stack([a[:, picks[:, c]] for c, (a, _, _) in enumerate(options)], axis=2)
    working = np.stack([w[:, picks[:, c]] for c, (_, w, _) in enumerate(options)], axis=2)
    flat = activation.reshape(-1, len(cells))
    finite = np.isfinite(flat).all(axis=1)
    return kept, picks, np.where(finite[:, None], flat, 0.0), working.reshape(-1, len(cells)), finite


def _guess(setup: BalanceSetup, cells: list[Cell], s: int, contents: np.ndarray, held: list,
           grid: np.ndarray) -> np.ndarray:
    """Per content, the grid index of the least cap on the last cell, the others ``held`` (their working-set
    groups, :func:`_groups`), at which the stage's relaxed memory fits: memory inverted in that cell's
    activation (:func:`~sappkit.balancer.exact.stage_bounds.activation_room`) for every product of the cells'
    groups, then read off the cell's staircases. Exact up to float rounding: the search's probes check it."""
    last, rows = len(cells) - 1, len(contents)
    cell = cells[last]
    every = np.broadcast_to(np.arange(len(cell.working)), (rows, len(cell.working)))
    free = (np.zeros(every.shape), cell.working[every], every)  # its activation is what is solved for
    kept, picks, activation, working, finite = _products(cells, contents, held[:last] + [free])
    room = activation_room(setup, s, np.repeat(kept, len(picks)), activation, working, last)
    beta = cell.first_within(np.repeat(contents[:, last], len(picks)), np.tile(picks[:, last], rows),
                             np.where(finite, room, -np.inf))
    return index_of(grid, beta.reshape(rows, len(picks)).min(axis=1))


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


def index_of(grid: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Per cap, the index of the least grid value not below it (``len(grid)`` past the end, for inf too)."""
    finite = np.isfinite(caps)
    safe = np.where(finite, caps, 0.0)
    return np.where(finite, np.searchsorted(grid, safe - EPS * np.maximum(1.0, np.abs(safe))), len(grid))
