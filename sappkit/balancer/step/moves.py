"""The local search's changes (:mod:`sappkit.balancer.step.local_search`): every move and swap that may
shorten a path, the placements they give, a lower bound on each one's step, and whether a placement stays
valid (every stage fits, by the balancer's memory model).
"""

from __future__ import annotations

import numpy as np

from ..evaluate import ceiling, placement_memory
from ..setup import BalanceSetup
from .known_memory import KnownMemory

__all__ = ["valid", "valid_placements", "valid_changes", "well_formed", "candidate_changes", "change_bounds",
           "among", "applied"]


def valid(setup: BalanceSetup, counts: np.ndarray) -> np.ndarray:
    """Per placement ``[n, item, chunk, stage]``: no negative count, no empty cell but the head's and the
    tail's, the multimodal frontier and recompute consistency hold, every stage fits."""
    return well_formed(setup, counts) & (placement_memory(setup, counts) <= ceiling(setup.memory_mb)).all(axis=1)


def valid_placements(memory: KnownMemory, counts: np.ndarray) -> np.ndarray:
    """:func:`valid`, the stages priced by the search's ``memory``."""
    setup = memory.setup
    return well_formed(setup, counts) & (memory.placement(counts) <= ceiling(setup.memory_mb)).all(axis=1)


def valid_changes(memory: KnownMemory, counts: np.ndarray, changes: np.ndarray) -> np.ndarray:
    """:func:`valid` of the placements ``changes`` (rows of :func:`candidate_changes`) make of the valid ``counts``:
    only the stages a change touches can stop fitting, so only their memory is priced (a p = 16 placement's
    memory costs eight times a change's), by the search's ``memory``. A change touches two cells: a move its
    ``a`` and ``b`` (its second half is ``a`` again), a swap its ``a`` (twice) and ``b``."""
    setup = memory.setup
    placements = applied(counts, changes)
    second = np.where(changes[:, 3] != changes[:, 1], changes[:, 3], changes[:, 5])
    stages = np.column_stack([changes[:, 1], second]) % setup.stages  # [change, the cells it touches]
    contents = np.moveaxis(placements, -1, 1)[np.arange(len(changes))[:, None], stages]
    fits = memory.total(contents, stages) <= ceiling(setup.memory_mb)
    return well_formed(setup, placements) & fits.all(axis=1)


def well_formed(setup: BalanceSetup, counts: np.ndarray) -> np.ndarray:
    """:func:`valid` but the memory."""
    ok = (counts >= 0).all(axis=(1, 2, 3))
    ok &= ((counts.sum(axis=1) >= 1) | ~setup.body_cells).all(axis=(1, 2))
    for k in range(1, len(setup.kinds)):
        later = counts[:, setup.item_indices(setup.kinds[k])].sum(axis=1)
        earlier = counts[:, setup.item_indices(setup.kinds[k - 1])].sum(axis=1)
        for c, s in setup.cells:
            before = setup.earlier_cells(c, s)
            if before:
                started = sum(later[:, d, t] for d, t in before) > 0
                ok &= ~(started & (earlier[:, c, s] > 0))
    if setup.consistency is not None:
        least, most = setup.consistency
        index = {item: i for i, item in enumerate(setup.items)}
        for k, kind in enumerate(setup.kinds[:-1]):
            later_most = [index[(other, most)] for other in setup.kinds[k + 1:] if (other, most) in index]
            if (kind, least) in index and later_most:
                clash = (counts[:, later_most].sum(axis=1) > 0) & (counts[:, index[(kind, least)]] > 0)
                ok &= ~clash.any(axis=(1, 2))
    return ok


def candidate_changes(setup: BalanceSetup, counts: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Every move and swap that shortens the path ``weight`` describes (``[item, chunk p + stage]``).

    Rows ``(i, a, j, b, k, c, l, d)``: a layer of ``i`` leaves cell ``a`` and
    one of ``j`` joins ``b``, then one of ``k`` leaves ``c`` and one of ``l``
    joins ``d``. A move's second half is ``(i, a, i, a)``, no change; a swap
    is ``(i, a, j, a)`` and ``(j, b, i, b)``.
    """
    cells = setup.chunks * setup.stages
    flat = counts.reshape(len(setup.items), cells)
    rows = []
    for kind in setup.kinds:
        items = np.array(setup.item_indices(kind))
        here, there = weight[items], flat[items]  # [item of the kind, cell]
        # A move (i, a) -> (j, b): a layer of i on a, and j on b weighing less on the path.
        gain = here[None, None] - here[:, :, None, None]
        i, a, j, b = np.nonzero((there[:, :, None, None] > 0) & (gain < 0))
        rows.append(np.column_stack([items[i], a, items[j], b, items[i], a, items[i], a]))
        # A swap: i on a becomes j, j on b becomes i (i < j, a != b).
        change = here[None, :, :] - here[:, None, :]  # [i, j, cell]: j instead of i on the cell
        gain = change[:, :, :, None] - change[:, :, None, :]
        held = (there[:, None, :, None] > 0) & (there[None, :, None, :] > 0)
        upper = np.triu(np.ones((len(items),) * 2, dtype=bool), 1)[:, :, None, None]
        i, j, a, b = np.nonzero(held & upper & (gain < 0))
        rows.append(np.column_stack([items[i], a, items[j], a, items[j], b, items[i], b]))
    return np.concatenate(rows)


def change_bounds(changes: np.ndarray, weights: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per change, the longest of the known paths after it: a lower bound on its step time."""
    delta = (weights[:, changes[:, 2], changes[:, 3]] - weights[:, changes[:, 0], changes[:, 1]]
             + weights[:, changes[:, 6], changes[:, 7]] - weights[:, changes[:, 4], changes[:, 5]])
    return (lengths[:, None] + delta).max(axis=0)


def among(changes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row of ``changes``: whether it is one of ``rows``."""
    if not len(rows):
        return np.zeros(len(changes), dtype=bool)
    return (changes[:, None, :] == rows[None, :, :]).all(axis=2).any(axis=1)


def applied(counts: np.ndarray, changes: np.ndarray) -> np.ndarray:
    """The placements each row of ``changes`` gives."""
    n, (items, v, p) = len(changes), counts.shape
    result = np.repeat(counts.reshape(1, items, v * p), n, axis=0)
    rows = np.arange(n)
    for out_item, out_cell, in_item, in_cell in (changes[:, :4].T, changes[:, 4:].T):
        np.add.at(result, (rows, out_item, out_cell), -1)
        np.add.at(result, (rows, in_item, in_cell), 1)
    return result.reshape(n, items, v, p)
