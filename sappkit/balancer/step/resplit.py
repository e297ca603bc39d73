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

from functools import lru_cache

import numpy as np

from ..setup import BalanceSetup

__all__ = ["stage_resplits", "MOST_SPLITS"]

#: Re-splits listed per stage at most.
MOST_SPLITS = 64


@lru_cache(maxsize=4096)
def _nearest_compositions(row: tuple[int, ...], most: int) -> list[tuple[int, tuple[int, ...]]]:
    """The ``most`` splits of ``row.sum()`` layers over ``len(row)`` chunks nearest ``row``, as (layers
    moved, split), ordered by layers moved, then by the split itself.

    The splits ``m`` layers away are those one layer's move from the splits ``m - 1`` away, so they come
    ring by ring until ``most`` are in: at most ``most`` times ``len(row)**2`` moves, however many
    chunks or layers (listing every split grows as layers to the power chunks). Cached: a search meets the
    same rows over and over."""
    start = row
    found, ring, moved = {start: 0}, {start}, 0
    while ring and len(found) <= most:
        moved += 1
        less = {split[:a] + (split[a] - 1,) + split[a + 1:] for split in ring for a in range(len(split)) if split[a]}
        ring = {split[:b] + (split[b] + 1,) + split[b + 1:] for split in less for b in range(len(split))}
        ring -= found.keys()
        found.update(dict.fromkeys(ring, moved))
    return sorted((layers, split) for split, layers in found.items())[:most]


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
            options = _nearest_compositions(tuple(row.tolist()), MOST_SPLITS + 1)
            nearest = sorted((moved + more, splits + (split,)) for moved, splits in nearest
                             for more, split in options)[:MOST_SPLITS + 1]
        for moved, splits in nearest:
            if moved:
                placement = counts.copy()
                placement[:, :, s] = splits
                found.append(placement)
    return np.array(found, dtype=int).reshape(-1, *counts.shape)
