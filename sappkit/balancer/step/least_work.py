"""A start for the step search: the placement whose busiest stage does the least work.

With many micro-batches a stage's steady state runs every chunk's forward and backward once per
micro-batch, so the step grows with the largest ``W_s = Σ_c (F(c, s) + B(c, s))``. The ``sapp`` objective
charges ``max_c F + max_c B`` instead, which keeps a stage's chunks equal and so can force recompute (or an
extra layer on one stage) that an uneven split of the same layers would avoid: chunks of one stage hold
different numbers of micro-batches in flight, so the layers may sit where they cost the least memory.

For one body kind whose options share a forward time this is exact in the enumeration's terms
(:mod:`sappkit.balancer.exact.enumeration`): per stage every product of its cells' Pareto-front mixes with
``W_s`` under a cap, the least ``W_s`` that fits per layer total, and a min-max DP over stages. Only the
busiest stage is then settled; among the placements whose every stage does at most that ``W*`` a second DP
takes the least total work ``Σ_s W_s`` (the least recompute the memory allows on every stage, not only
the busiest), each stage's content breaking ties by the least stage time ``max_c F + max_c B`` (the
``sapp`` objective's: an even split over the chunks).
"""

from __future__ import annotations

import numpy as np

from ..evaluate import ceiling
from ..exact.cells import Cache, best_per_total, enumerate_stage, min_max, placement, stage_time
from ..setup import BalanceSetup

__all__ = ["least_work"]

#: How the listing's cap on a stage's work grows when no placement fits under it.
_GROWTH = 1.1
#: Products of cell contents a stage may list: a start is worth a fraction of the search's time, so past
#: this (many layers a cell on several options) there is none.
_BUDGET = 20_000


def least_work(setup: BalanceSetup, cache: Cache, cap: float) -> np.ndarray | None:
    """The placement of least ``max_s W_s`` among those whose every stage does at most ``cap`` (module
    docstring); None when the model has several body kinds, options with different forward times or memory
    kept once, when nothing fits under ``cap``, or past :data:`_BUDGET`.

    The stages are listed under a cap that starts at the average stage's least work and grows by
    :data:`_GROWTH` up to ``cap`` until a placement fits under it, which keeps the listings small.
    """
    if len(setup.kinds) != 1 or np.ptp(setup.forward) > 0 or np.ptp(setup.once) > 0:
        return None
    total, forward, least = int(setup.counts[0]), float(setup.forward[0]), float(setup.backward.min())
    tau = min(cap, (total * (forward + least) + setup.fixed_forward.sum() + setup.fixed_backward.sum())
              / setup.stages)
    while True:
        stages = _stages(setup, cache, tau)
        if stages is None:
            return None
        best, totals = min_max([best_per_total(c.total, work, fits, total + 1)[0] for c, work, fits in stages],
                               total)
        if np.isfinite(best):
            break
        if tau >= cap:
            return None
        tau = min(cap, tau * _GROWTH)
    tables = []
    for s, (combos, work, fits) in enumerate(stages):
        even = np.argsort(stage_time(setup, s, combos), kind="stable")  # ties in work go to the evenest split
        chosen, pick = best_per_total(combos.total[even], work[even], (fits & (work <= best * (1 + 1e-9)))[even],
                                      total + 1)
        tables.append((chosen, np.where(pick >= 0, even[np.maximum(pick, 0)], -1)))
    totals = _min_sum([chosen for chosen, _ in tables], total)
    return placement(setup, [c for c, _, _ in stages], [int(tables[s][1][n]) for s, n in enumerate(totals)], cache)


def _stages(setup: BalanceSetup, cache: Cache, tau: float) -> list[tuple] | None:
    """Per stage its listed combos with their work and whether they fit within ``tau`` and the memory limit;
    None past the enumeration's budget."""
    total, forward, least = int(setup.counts[0]), float(setup.forward[0]), float(setup.backward.min())
    stages = []
    for s in range(setup.stages):
        def caps(c, s=s):
            room = tau - setup.fixed_forward[c, s] - setup.fixed_backward[c, s]
            return (-1 if room < 0 else int(np.floor(room / (forward + least) + 1e-9)),
                    lambda n: tau - setup.fixed_forward[c, s] - forward * n)

        combos = enumerate_stage(setup, cache, s, caps, total, budget=_BUDGET)
        if combos is None:
            return None
        work = forward * combos.total + setup.fixed_forward[:, s].sum() + combos.backward.sum(axis=1)
        stages.append((combos, work, (combos.exact_mb <= ceiling(setup.memory_mb)) & (work <= tau * (1 + 1e-9))))
    return stages


def _min_sum(tables: list[np.ndarray], total: int) -> list[int]:
    """The layer totals ``n_s`` (summing to ``total``) of least ``Σ_s table_s[n_s]``: a DP over stages."""
    best = np.r_[0.0, np.full(total, np.inf)]
    choices = []
    for table in tables:
        ks = np.flatnonzero(np.isfinite(table[: total + 1]))
        source = np.arange(total + 1)[None, :] - ks[:, None]
        candidate = np.where(source >= 0, best[np.maximum(source, 0)], np.inf) + table[ks][:, None]
        row = candidate.argmin(axis=0)
        choices.append(ks[row])
        best = candidate[row, np.arange(total + 1)]
    picked, left = [], total
    for choice in reversed(choices):
        picked.append(int(choice[left]))
        left -= picked[-1]
    return picked[::-1]
