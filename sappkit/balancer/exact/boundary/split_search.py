"""The split objective of ``m = p`` for :mod:`.search`'s search: ``S + max(L, S)``, ``S`` the largest
backward of a chunk but the last, ``L`` the last chunk's term.

For a bound ``sigma`` on ``S`` the DP over stages (:mod:`.stage_dp`) finds
the least largest ``L``, and a branch and bound over ``sigma``
(:func:`_split_round`) finds the least objective under a cap ``tau``, which
grows from a growth step above the unpriced bound until the optimum lies
under it. Past :data:`_SPLIT_BUDGET` bounds tried the search hands its best
placement, unproven, to the integer program (with one kind, :mod:`~sappkit.balancer.exact.enumeration`'s
enumeration may prove it first).
"""

from __future__ import annotations

import heapq

import numpy as np

from .cap_search import least_shared_cap
from ..cells import EPS, Cache
from ..segments import within
from ...setup import BalanceSetup
from .stage_cells import cells_of
from .stage_dp import (GROWTH, boundary_chunks, chunk_optimum, chunk_patterns, stage_counts, unpriced_bound,
                       work)

__all__ = ["search"]

#: Bounds on ``S`` the search may try (each a DP over every stage's priced contents) before it hands its best
#: placement, unproven, to the integer program.
_SPLIT_BUDGET = 60


def search(setup: BalanceSetup, cache: Cache) -> tuple[bool, np.ndarray | None, float, float] | None:
    """:func:`.search.search` for the split objective: the cap ``tau`` on it grows as for the stage time,
    and each round bounds ``S`` by ``sigma`` (:func:`_split_round`)."""
    least_backward = work(setup, setup.backward, np.min) + setup.fixed_backward.sum()
    most_work = work(setup, setup.forward + setup.backward, np.max) + setup.fixed_backward.sum() \
        + setup.fixed_forward.sum()
    lower = unpriced_bound(setup, cache, 2 * least_backward / (setup.stages * setup.chunks), 3 * most_work, "split")
    if lower is None or not np.isfinite(lower):
        return None if lower is None else (False, None, np.inf, 3 * most_work)
    tau = lower * GROWTH  # S and L peak on different stages: the bound is seldom within reach
    budget = [_SPLIT_BUDGET if cache.split_budget is None else cache.split_budget]
    kept = (np.inf, None)
    while True:
        value, counts, round_lower = _split_round(setup, cache, tau, budget, kept)
        kept = (value, counts)
        if round_lower is None:  # past the budget: the best placement found, unproven
            return None if kept[1] is None else (False, kept[1], kept[0], lower)
        lower = max(lower, round_lower)
        if counts is not None and within(value, tau):
            return bool(within(value, lower)), counts, value, lower
        if tau >= 3 * most_work:  # every content was listed: no placement fits with exact memory
            return False, None, np.inf, lower
        tau = min(tau * GROWTH, 3 * most_work, value if counts is not None else np.inf)


def _split_round(setup: BalanceSetup, cache: Cache, tau: float, budget: list[int], kept: tuple):
    """(least objective found, its placement or None, lower bound) of the split objective with the contents
    listed under ``tau``, from the best placement ``kept`` (objective, counts) of earlier rounds; exact where it
    is at most ``tau``. The lower bound (on the objective or ``tau``, whichever is less) is None where the round
    stopped short, past ``budget`` (the evaluations left, counted down) or the enumeration budget."""
    cache.check_time()
    return _SplitRound(setup, cache, tau, budget, kept).run()


class _SplitRound:
    """One round of the branch and bound over ``sigma`` under a cap ``tau`` (:func:`_split_round`).

    For a boundary chunk and a bound ``sigma`` on ``S`` the min-max DP over ``L`` gives ``lambda(sigma)``
    (exact while ``sigma + lambda <= tau``: every content that could do better is listed), and the objective
    is the least over chunks and ``sigma`` of ``sigma + max(lambda(sigma), sigma)``, ``sigma`` running over
    the backward caps of the chunk's cells but the last (:func:`_sigmas`). ``lambda`` never grows with
    ``sigma``, so on the candidates ``sigma_i < ... < sigma_j`` no objective is below ``sigma_i +
    max(lambda(sigma_j), sigma_i)``: a branch and bound, best first over every chunk's intervals, evaluates the
    candidates whose interval could still beat the best found. The listed ``lambda`` never grows with
    ``sigma`` either, and a placement under ``tau`` holds only listed contents, so that bound computed with it
    bounds every objective in the interval, or ``tau``. An interval's candidates that could not beat the best
    found even at the listed ``lambda`` of its right end are cut off, and the rest evaluated from its new right
    end: where ``lambda`` is flat there, one evaluation settles them. An evaluation also settles the
    candidates down to where its placement's contents still fit (:func:`_settled`), and the search steps left
    of that candidate while such steps keep ``lambda``: that finds where ``lambda`` drops. A chunk whose listed
    contents make up no placement is not searched."""

    def __init__(self, setup: BalanceSetup, cache: Cache, tau: float, budget: list[int], kept: tuple):
        self.setup, self.cache, self.tau, self.budget = setup, cache, tau, budget
        self.best = list(kept)
        self.lower = tau
        # per chunk: its candidates; candidate -> (listed relaxed lambda, its objective); settled candidates to
        # step left of
        self.sigmas, self.known, self.sweeps = {}, {}, {}
        self.heap = []  # best first: (bound, chunk, lo, hi, anchor)

    def run(self):
        """The round's (least objective, placement, lower bound), the bound None where it stopped short."""
        for boundary_chunk in boundary_chunks(self.setup):
            if not self._start(boundary_chunk):
                return self.best[0], self.best[1], None
        while self.heap:
            least, chunk, lo, hi, anchor = heapq.heappop(self.heap)
            if not (least < self.best[0] and not within(self.best[0], least)):
                self.lower = min(self.lower, least)  # and every interval left, bounded no lower
                break
            if not self._branch(chunk, lo, hi, anchor):
                return self.best[0], self.best[1], None
        evaluated = [value if within(value, self.tau) else self.tau
                     for chunk in self.known for _, value in self.known[chunk].values()]
        return self.best[0], self.best[1], min([self.lower, self.best[0], *evaluated])

    def _start(self, chunk: int) -> bool:
        """List ``chunk``'s candidates, evaluate the largest and queue the rest; False past the budgets."""
        unpriced = chunk_optimum(self.setup, self.cache, chunk, self.tau, "split", None, False)
        if unpriced is None:
            return False
        if not within(unpriced[0], self.tau):
            return True
        self.sigmas[chunk], self.known[chunk] = _sigmas(self.setup, self.cache, chunk, self.tau), {}
        self.sweeps[chunk] = set()
        settled = self._evaluate(chunk, len(self.sigmas[chunk]) - 1)
        if settled is None:
            return False
        self._push(chunk, 0, settled, settled)
        return True

    def _branch(self, chunk: int, lo: int, hi: int, anchor: int) -> bool:
        """Evaluate one candidate of ``lo .. hi - 1`` and queue what is left either side; False past the
        budgets."""
        listed = self.known[chunk][anchor][0]
        best = self.best[0]
        reach = int(np.searchsorted(self.sigmas[chunk], min(best - listed, best / 2)))  # past it none beats best
        if reach <= lo:
            return True
        sweep = anchor == hi and anchor in self.sweeps[chunk]
        mid = min(reach, hi) - 1 if reach < hi or sweep else (lo + hi - 1) // 2
        settled = self._evaluate(chunk, mid, listed if sweep else None)
        if settled is None:
            return False
        self._push(chunk, lo, settled, settled)
        self._push(chunk, mid + 1, min(hi, reach), anchor)
        return True

    def _evaluate(self, chunk: int, i: int, swept: float | None = None) -> int | None:
        """Evaluate candidate ``i``: the least candidate settled with it (:func:`_settled`, where the relaxed and
        exact ``lambda`` agree), None past the budgets. ``swept``: the ``lambda`` of the settled candidate just
        right of ``i``, when the search steps left from it."""
        self.budget[0] -= 1
        found = chunk_optimum(self.setup, self.cache, chunk, self.tau, "split", float(self.sigmas[chunk][i]), True) \
            if self.budget[0] >= 0 else None
        if found is None:
            return None
        relaxed, value, placed, _, _ = found
        settled = i
        if placed is not None and within(value, relaxed):
            settled, placed = _settled(self.setup, found, self.sigmas[chunk])
        if settled < i and (swept is None or within(relaxed, swept)):
            self.sweeps[chunk].add(settled)
        for j in {i, settled}:
            sigma = float(self.sigmas[chunk][j])
            self.known[chunk][j] = (relaxed, sigma + max(relaxed, sigma))
        sigma = float(self.sigmas[chunk][settled])
        if placed is not None and sigma + max(value, sigma) < self.best[0]:
            self.best[:] = sigma + max(value, sigma), placed
        return settled

    def _push(self, chunk: int, lo: int, hi: int, anchor: int) -> None:
        """Queue candidates ``lo .. hi - 1`` (``anchor >= hi`` evaluated) at the least objective they could reach,
        unless none can beat ``tau`` or a smaller evaluated candidate: ``lower`` takes what proves it."""
        values, listed = self.sigmas[chunk], self.known[chunk][anchor][0]
        if lo >= hi:
            return
        least = values[lo] + max(listed, values[lo])
        if not within(least, self.tau):
            self.lower = min(self.lower, self.tau)
            return
        left = self.known[chunk].get(lo - 1)
        if within(listed, self.tau - values[anchor]) and left is not None and within(left[0], listed):
            self.lower = min(self.lower, left[1])  # lambda flat (and true) up to the anchor: sigma only adds
            return
        heapq.heappush(self.heap, (least, chunk, lo, hi, anchor))


def _settled(setup: BalanceSetup, found, sigmas: np.ndarray) -> tuple[int, np.ndarray]:
    """The least candidate ``d`` at which the contents of the exact placement ``found`` (at candidate ``i``) fit
    with ``L`` no larger (each stage's last cell capped at what keeps its ``L`` within the optimum), and that
    placement: ``lambda`` is then the same on candidates ``d .. i``, where the objective is least at ``d``.

    A stage fits at its own ``S`` (its points stay the lightest under it), so stages are settled from the
    largest ``S`` down, until the rest are within the least cap found."""
    _, value, counts, tables, picks = found
    placed, own = counts.copy(), {}
    for s, (pattern, content) in enumerate(picks):
        table = tables[s][pattern]
        own[s] = stage_counts(setup, table, content, table.beta[content], int(table.group[content]))[1]
    settled = 0.0
    for s in sorted(own, key=own.get, reverse=True):
        if within(own[s], settled):
            break
        pattern, content = picks[s]
        table = tables[s][pattern]
        offset = max(float(cell.forward[table.contents[content, c]]) for c, cell in enumerate(table.cells))
        cap, beta, group = least_shared_cap(setup, table.cells, s, table.contents[content], value - offset,
                                            own[s])
        settled = max(settled, cap)
        placed[:, :, s], _ = stage_counts(setup, table, content, beta, group)
    return int(np.searchsorted(sigmas, settled - EPS * max(1.0, settled))), placed


def _sigmas(setup: BalanceSetup, cache: Cache, boundary_chunk: int, tau: float) -> np.ndarray:
    """Every bound on ``S`` worth trying under ``tau`` for one boundary chunk: 0 and the backward caps of the
    cells but the last chunk's within ``tau / 2``, ascending."""
    values = [np.zeros(1)]
    for pattern in chunk_patterns(setup, boundary_chunk):
        for s in range(setup.stages):
            for cell in cells_of(setup, cache, s, pattern, tau, "split")[:-1]:
                values.append(cell.values[within(cell.values, tau / 2)])
    values = np.unique(np.concatenate(values))
    return values[np.r_[True, np.diff(values) > EPS * np.maximum(1.0, values[1:])]]  # sums in another order: one
