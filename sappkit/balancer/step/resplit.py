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


def _compositions(n: int, parts: int) -> np.ndarray:
    """Every way to write ``n`` as ``parts`` non-negative integers, ``[way, part]``."""
    if parts == 1:
        return np.array([[n]])
    return np.array([(*head, n - sum(head)) for head in itertools.product(range(n + 1), repeat=parts - 1)
                     if sum(head) <= n])


def stage_resplits(setup: BalanceSetup, counts: np.ndarray) -> np.ndarray:
    """Every other split of each stage's layers over its chunks (module docstring), as placements
    ``[n, item, chunk, stage]``; memory and the cells' rules are the caller's to check.

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
        here = counts[:, :, s]
        ways = [_compositions(int(n), setup.chunks) for n in here.sum(axis=1)]
        splits = np.array([np.stack(choice) for choice in itertools.product(*ways)])  # [split, item, chunk]
        splits = splits[(splits != here).any(axis=(1, 2))]
        moved = np.abs(splits - here).sum(axis=(1, 2))
        for split in splits[np.argsort(moved, kind="stable")[:MOST_SPLITS]]:
            placement = counts.copy()
            placement[:, :, s] = split
            found.append(placement)
    return np.array(found, dtype=int).reshape(-1, *counts.shape)
