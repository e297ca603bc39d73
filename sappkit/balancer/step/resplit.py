"""Stage re-splits: a stage shares its layers out over its chunks anew, each layer keeping its option.

With several chunks a stage's cells run at different points of the step, and their in-flight counts
differ, so the same layers split another way over a stage's chunks can be faster or free memory for less
recompute elsewhere. Going there one change at a time (a layer to another chunk, then an option swap)
passes through slower placements; the local search (:mod:`sappkit.balancer.step.local_search`) tries
every re-split of a stage in one step when no single change helps.

A stage whose layers split more ways than :data:`MOST_SPLITS` keeps the splits nearest its own (fewest
layers moved), so the neighbourhood stays a fraction of a search round.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..setup import BalanceSetup

__all__ = ["stage_resplits", "MOST_SPLITS"]

#: Re-splits listed per stage at most.
MOST_SPLITS = 64


def _nearest_compositions(row: np.ndarray, most: int) -> list[tuple[int, tuple[int, ...]]]:
    """The ``most`` splits of ``row.sum()`` layers over ``len(row)`` chunks nearest ``row``, as (layers
    moved, split), ordered by layers moved, then by the split itself.

    A split ``m`` layers away differs from ``row`` by at most ``m`` in each chunk, so the splits within a
    radius come from a small grid of differences; the radius grows until ``most`` of them are in."""
    row = np.asarray(row, dtype=int)
    if len(row) == 1:
        return [(0, tuple(int(n) for n in row))]
    radius, total = 0, int(row.sum())
    while True:
        radius += 1
        steps = np.array(list(itertools.product(range(-radius, radius + 1), repeat=len(row) - 1)), dtype=int)
        deltas = np.column_stack([steps, -steps.sum(axis=1)])
        moved = np.abs(deltas).sum(axis=1) // 2
        keep = (moved <= radius) & ((row + deltas) >= 0).all(axis=1)
        if keep.sum() > most or radius >= total:
            break
    near = sorted((int(m), tuple(int(n) for n in split)) for m, split in zip(moved[keep], row + deltas[keep]))
    return near[:most]


def stage_resplits(setup: BalanceSetup, counts: np.ndarray) -> np.ndarray:
    """The other splits of each stage's layers over its chunks nearest its own (fewest layers moved, at most
    :data:`MOST_SPLITS` a stage), as placements ``[n, item, chunk, stage]``; memory and the cells' rules
    are the caller's to check.

    The nearest splits of a stage are found item by item, keeping the nearest :data:`MOST_SPLITS` + 1
    combinations so far: a combination among the nearest has its first items' part among the nearest too,
    so this is the same list as sorting every split, with no need to enumerate them (a stage of 40 layers
    of three options over four chunks splits about 10^11 ways).

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit.balancer.setup import make_setup
    >>> rows = [dict(kind="b", role="body", count=8, param_mb=1, option=o, forward_time=1, backward_time=bt,
    ...              activation_mb=1) for o, bt in (("none", 2), ("full", 3))]
    >>> setup = make_setup(pd.DataFrame(rows), stages=2, micro_batches=4, chunks=2, memory_mb=1e4)
    >>> counts = np.array([[[1, 2], [1, 2]], [[1, 0], [1, 0]]])  # [item, chunk, stage]
    >>> [split[:, :, 0].tolist() for split in stage_resplits(setup, counts)][:2]
    [[[0, 2], [1, 1]], [[1, 1], [0, 2]]]
    """
    counts = np.asarray(counts, dtype=int)
    found = []
    for s in range(setup.stages):
        nearest = [(0, ())]  # (layers moved, one split per item so far)
        for row in counts[:, :, s]:
            options = _nearest_compositions(row, MOST_SPLITS + 1)
            nearest = sorted((moved + more, splits + (split,)) for moved, splits in nearest
                             for more, split in options)[:MOST_SPLITS + 1]
        for moved, splits in nearest:
            if moved:
                placement = counts.copy()
                placement[:, :, s] = splits
                found.append(placement)
    return np.array(found, dtype=int).reshape(-1, *counts.shape)
