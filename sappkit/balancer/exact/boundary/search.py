"""Exact search for one or two body kinds over several chunks: a DP over stages that carries the kind boundary.

With ``v > 1`` chunks a stage holds ``v`` cells far apart in model order, so
the run DP of :mod:`~sappkit.balancer.exact.segments` does not apply. With two kinds in model order
the first kind's last layer sits on one cell, the *boundary cell* ``(c*,
s*)``: cells before it in model order hold the first kind only, cells after
it the second only, and it may hold the end of the first and the start of
the second (not on DualPipeV's chunk 1, where SAPP's pipeline balancer's frontier counts the
cell itself as earlier). So for a boundary chunk ``c*`` every stage's cells
follow one of three patterns: the one of the stages before ``s*`` in the
DP's stage order, the boundary stage's, the one after. One kind is the
case ``n1 = 0`` with one pattern; pricing a cell's layer count rather
than every product of its front points is what makes this search faster
than the enumeration (:mod:`~sappkit.balancer.exact.enumeration`) there too.

Per stage and pattern the search lists every product of the cells'
compositions (layers of each kind) whose stage time can stay under a cap
``tau``. A cell's contents are points of its composition's front
(:func:`~sappkit.balancer.exact.segments.run_front`), and for a backward cap
``beta`` the lightest point under it is all memory needs (memory grows with
every cell's activation and charged working set; a charged cell keeps one
such staircase per working set), so a product is priced at the least
``beta`` that fits, by a search over the cells' backward values
(:mod:`.stage_tables`), and contents are priced per layers of each kind
``(n0, n1)`` only while they could beat the best found. A DP over stages
with state (before or after the boundary, ``n0``, ``n1``) finds the least
largest stage time: the ``sapp`` objective at levels 0 and 1 where ``m !=
p``. ``tau`` grows until the optimum lies under it, which proves it: a
better placement would use only listed contents. It starts at the same
DP's optimum with every content at its least stage time (no pricing, only
listings), a lower bound. As in the enumeration, relaxed memory gives the
lower bound, exact memory the placement.

Where ``m = p`` the objective splits into ``S + max(L, S)`` (``S`` the
largest backward of a chunk but the last, ``L`` the last chunk's term):
for a bound ``sigma`` on ``S`` the same DP finds the least largest ``L``,
and a branch and bound over ``sigma`` finds the least objective
(:mod:`.split_search`). The DP itself is :mod:`.stage_dp`.
"""

from __future__ import annotations

import numpy as np

from ..cells import Cache
from ....columns import MEMORY_MB
from ...evaluate import evaluate
from .. import segments
from . import split_search
from ..segments import within
from ...setup import BalanceSetup
from ..stage_bounds import monotone_chunks
from .stage_dp import GROWTH, optimum, unpriced_bound, work

__all__ = ["why_not_applicable", "search", "least_memory"]

#: How the memory cap grows when the least-memory search finds nothing under it.
_MEMORY_GROWTH = 1.3


def why_not_applicable(setup: BalanceSetup) -> str:
    """Why the search does not apply to ``setup`` ('' when it does)."""
    if len(setup.kinds) > 2:
        return "more than two body kinds with more than one chunk"
    shared = segments.why_not_applicable(setup)
    if shared:
        return shared
    if not all(monotone_chunks(setup, s).all() for s in range(setup.stages)):
        return "a chunk whose stage memory falls as it holds more (DualPipeV under SAPP's overhead)"
    return ""


def search(setup: BalanceSetup, cache: Cache) -> tuple[bool, np.ndarray | None, float, float] | None:
    """(proven, placement, its value, lower bound) for ``setup``'s ``sapp`` objective; placement None
    (proven) when nothing fits; None past the enumeration budget."""
    if not evaluate(setup, _even_lightest(setup)).fits and _fits(setup, cache) is False:
        return True, None, np.inf, np.inf
    if setup.bottleneck_split:
        return split_search.search(setup, cache)
    fixed = setup.fixed_forward.sum() + setup.fixed_backward.sum()
    least_work = work(setup, setup.forward + setup.backward, np.min) + fixed
    most_work = work(setup, setup.forward + setup.backward, np.max) + fixed
    tau = lower = unpriced_bound(setup, cache, least_work / (setup.stages * setup.chunks), most_work, "time")
    if tau is None or not np.isfinite(tau):
        return None if tau is None else (False, None, np.inf, most_work)
    while True:
        found = optimum(setup, cache, tau, "time")
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
        tau = min(tau * GROWTH, most_work, value if counts is not None else np.inf)


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
    found = optimum(setup, cache, setup.memory_mb, "memory")
    return None if found is None else bool(within(found[0], setup.memory_mb))


def least_memory(setup: BalanceSetup, cache: Cache) -> np.ndarray | None:
    """The placement whose largest stage memory is least (time ignored); None past the enumeration budget.

    The cap starts at what the even, lightest placement needs: the optimum lies under it, so one listing
    usually proves it."""
    cap = float(evaluate(setup, _even_lightest(setup)).stages[MEMORY_MB].max())
    while True:
        found = optimum(setup, cache, cap, "memory")
        if found is None:
            return None
        _, value, counts = found
        if counts is not None and within(value, cap):
            return counts
        cap *= _MEMORY_GROWTH
