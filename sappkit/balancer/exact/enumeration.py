"""The exact search for one body kind: Pareto cells, stage tables, a DP over stages.

Applies when the model has one body kind whose options share one forward
time and one ``memory_once_mb``, with or without the working set, at
optimisation levels 0 and 1 (every objective of the ``sapp`` table but
approach A), on every schedule. It answers one chunk, chunks whose memory
is not monotone (DualPipeV's second chunk under SAPP's overhead), and what
the boundary search (:mod:`sappkit.balancer.exact.boundary`) left unproven
past its budgets.

1. **Cells** (:mod:`~sappkit.balancer.exact.cells`). ``n`` layers on a cell
   are a mix of options; where stage memory grows with the cell's activation
   only mixes on the Pareto front of (backward, activation) matter, because
   time grows with the backward and memory with the activation
   (``front(n) = pareto(front(n-1) + one option)``). Where it does not
   every distinct mix is kept.
2. **Stages.** For each stage, every product of its cells' front points
   whose time stays under a cap ``tau`` is enumerated with its exact memory
   (the overhead ``max(0, ceil(.))``) and its relaxed memory (``max(0, .)``,
   a lower bound that is monotone in every activation, which is what makes
   the Pareto pruning exact for it).
3. **Stages together.** A dynamic program over stages with ``Σ n_s = L``:
   min-max for the stage time and for memory, ``σ + max(λ, σ)`` over a sweep
   of ``σ`` for the split objective.

The relaxed tables give a proven lower bound, the exact tables a real
placement; equal values prove it optimal. When the caps exclude every
solution ``tau`` grows; when the bounds differ (the overhead's rounding
bites within 1 MB of the limit) the caller hands both to the integer program.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..setup import BalanceSetup
from .cells import (EPS, Cache, Combos, best_per_total, enumerate_stage, min_max, placement, split_values, stage_time,
                    subset)
from .result import SearchResult, found
from .stage_bounds import fixed_memory, monotone_chunks

__all__ = ["why_not_applicable", "search", "least_memory"]

#: How the per-stage cap grows when the caps exclude every solution.
_GROWTH = 1.06
#: How the memory cap grows when the least-memory search finds nothing under it.
_MEMORY_GROWTH = 1.3


def why_not_applicable(setup: BalanceSetup) -> str:
    """Why this search does not apply to ``setup``, a set-up with one body kind ('' when it does)."""
    if setup.level >= 2:
        return "optimization_level >= 2"
    if np.ptp(setup.forward) > 0 or np.ptp(setup.once) > 0:
        return "options with different forward times or memory kept once"
    return ""


@dataclass
class _Tables:
    """Per stage, the enumerated combos and, per layer total, the best feasible combo (relaxed, exact)."""

    combos: list[Combos]
    lower: list[tuple[np.ndarray, np.ndarray]]
    upper: list[tuple[np.ndarray, np.ndarray]]


def _kind(setup: BalanceSetup) -> str:
    return "split" if setup.bottleneck_split else "time"


def _work_bounds(setup: BalanceSetup) -> tuple[float, float]:
    """(least, most) total work of all layers: every layer on its fastest / slowest option."""
    fixed = float(setup.fixed_forward.sum() + setup.fixed_backward.sum())
    n = int(setup.counts[0])
    return (n * (setup.forward[0] + setup.backward.min()) + fixed,
            n * (setup.forward[0] + setup.backward.max()) + fixed)


def _count_cap(room: float, per_layer: float) -> int:
    """Most layers of ``per_layer`` cost within ``room`` (-1 when none fit)."""
    if room < -EPS:
        return -1
    return 10**9 if per_layer <= 0 else int(math.floor(max(room, 0.0) / per_layer + EPS))


def _caps(setup: BalanceSetup, kind: str, tau: float, s: int):
    """Per cell: the most layers and, per layer count, the most backward an objective of ``tau`` allows."""
    f, b_min, v = setup.forward[0], setup.backward.min(), setup.chunks

    def cell(c):
        fixed_f, fixed_b = setup.fixed_forward[c, s], setup.fixed_backward[c, s]
        if kind == "split" and c < v - 1:
            return _count_cap(tau / 2 - fixed_b, b_min), (lambda n: tau / 2)
        if kind == "split":
            per_layer = b_min + setup.last_chunk_factors[s] / setup.slices * f
            return _count_cap(tau - fixed_f - fixed_b, per_layer), (lambda n: tau - fixed_f)
        return _count_cap(tau - fixed_f - fixed_b, f + b_min), (lambda n: tau - fixed_f - f * n)

    return cell


def _stage_keep(setup: BalanceSetup, kind: str, tau: float, s: int, combos: Combos) -> np.ndarray:
    """Combos whose own value does not exceed what ``tau`` allows."""
    if kind == "split":
        first, last = split_values(setup, s, combos)
        return (first <= tau / 2 + EPS) & (last <= tau + EPS)
    return stage_time(setup, s, combos) <= tau + EPS * max(1.0, abs(tau))


def _tables(setup: BalanceSetup, kind: str, tau: float, cache: Cache) -> _Tables | None:
    """Every stage's combos under ``tau`` and their best values per layer total; None past the budget."""
    cache.check_time()
    total = int(setup.counts[0])
    combos_all, lower, upper = [], [], []
    for s in range(setup.stages):
        key = (kind, s, round(tau, 9))
        if key not in cache.stages:
            time_cap = None if kind == "split" else tau
            combos = enumerate_stage(setup, cache, s, _caps(setup, kind, tau, s), total, time_cap=time_cap)
            if combos is None:
                return None
            cache.stages[key] = subset(combos, _stage_keep(setup, kind, tau, s, combos))
        combos = cache.stages[key]
        combos_all.append(combos)
        if kind == "split":
            continue
        value = stage_time(setup, s, combos)
        for memory, out in ((combos.relaxed_mb, lower), (combos.exact_mb, upper)):
            out.append(best_per_total(combos.total, value, memory <= setup.memory_mb + EPS, total + 1))
    return _Tables(combos_all, lower, upper)


def _solve_tables(setup: BalanceSetup, kind: str, tables: _Tables, exact: bool) -> tuple[float, list[int] | None]:
    """Optimum over the tables (exact or relaxed memory) and the chosen combo per stage."""
    total = int(setup.counts[0])
    best = tables.upper if exact else tables.lower
    if kind == "time":
        value, totals = min_max([b for b, _ in best], total)
        return value, [int(best[s][1][n]) for s, n in enumerate(totals)] if totals else None
    return _solve_split(setup, tables, total, exact)


def _solve_split(setup: BalanceSetup, tables: _Tables, total: int, exact: bool) -> tuple[float, list[int] | None]:
    """min over σ of σ + max(λ(σ), σ): λ(σ) the min-max last-chunk bound with every S_s <= σ.

    Per stage and layer total only the staircase of (S, L) points matters;
    they enter in order of S, each stage keeping per layer total the least L.
    """
    points = _staircase(setup, tables, exact)
    lambdas = np.full((setup.stages, total + 1), np.inf)
    picks = np.full((setup.stages, total + 1), -1)
    value, chosen = np.inf, None
    ends = np.flatnonzero(np.r_[points[1:, 0] != points[:-1, 0], True]) if len(points) else []
    start = 0
    for end in ends:
        sigma = points[end, 0]
        if 2 * sigma >= value - EPS * abs(value):
            break
        for _, last, s, n, index in points[start:end + 1]:
            s, n = int(s), int(n)
            if last < lambdas[s, n]:
                lambdas[s, n], picks[s, n] = last, int(index)
        start = end + 1
        bound, totals = min_max(list(lambdas), total)
        if np.isfinite(bound) and sigma + max(bound, sigma) < value:
            value = sigma + max(bound, sigma)
            chosen = [int(picks[s, n]) for s, n in enumerate(totals)]
    return value, chosen


def _staircase(setup: BalanceSetup, tables: _Tables, exact: bool) -> np.ndarray:
    """Rows (S, L, stage, total, combo) of the feasible combos not dominated within their (stage, total), by S."""
    rows = []
    for s, combos in enumerate(tables.combos):
        first, last = split_values(setup, s, combos)
        memory = combos.exact_mb if exact else combos.relaxed_mb
        ok = np.flatnonzero(memory <= setup.memory_mb + EPS)
        points = np.column_stack([first[ok], last[ok], np.full(ok.size, s), combos.total[ok], ok])
        points = points[np.lexsort((points[:, 1], points[:, 0], points[:, 3]))]
        starts = np.flatnonzero(np.r_[True, points[1:, 3] != points[:-1, 3]]) if len(points) else []
        for begin, end in zip(starts, [*starts[1:], len(points)]):
            group = points[begin:end]
            best_before = np.minimum.accumulate(np.r_[np.inf, group[:-1, 1]])
            rows.append(group[group[:, 1] < best_before])
    points = np.concatenate(rows) if rows else np.zeros((0, 5))
    return points[np.argsort(points[:, 0], kind="stable")]


def _start(setup: BalanceSetup, kind: str) -> tuple[float, float]:
    """A lower bound on the objective to start ``tau`` from, and a value past which no cap binds."""
    least, most = _work_bounds(setup)
    cells = setup.stages * setup.chunks
    if kind == "split":
        backward = int(setup.counts[0]) * setup.backward.min()
        return 2 * backward / cells, 3 * most
    return least / cells, 2 * most


def search(setup: BalanceSetup, cache: Cache) -> SearchResult | None:
    """Bounds (and usually the proven optimum) of ``setup``'s objective by enumerating each stage's products of
    front points under a growing cap; None past the enumeration budget. ``proven`` with ``counts`` None means
    no placement fits."""
    fits = _least_memory(setup, cache, setup.memory_mb, proof=True)
    if isinstance(fits, str) and fits == "none":
        return SearchResult(proven=True, counts=None, upper=None, lower=np.inf)
    kind = _kind(setup)
    tau, ceiling = _start(setup, kind)
    lower = -np.inf
    while True:
        tables = _tables(setup, kind, tau, cache)
        if tables is None:
            return None if not np.isfinite(lower) else SearchResult(False, None, None, lower)
        relaxed, _ = _solve_tables(setup, kind, tables, exact=False)
        if relaxed <= tau + EPS * abs(tau):
            lower = relaxed
            value, picks = _solve_tables(setup, kind, tables, exact=True)
            if picks is not None and value <= tau + EPS * abs(tau):
                return found(setup, placement(setup, tables.combos, picks, cache), lower)
        else:
            lower = max(lower, tau)
        if tau >= ceiling:
            return SearchResult(False, None, None, lower)
        tau *= _GROWTH


def least_memory(setup: BalanceSetup, cache: Cache) -> np.ndarray | None:
    """The placement whose largest stage memory is least, time ignored; None past the enumeration budget or
    where a chunk's memory is not monotone.

    Exact up to the overhead's rounding: no placement needs 1 MB less.
    """
    cap = setup.memory_mb
    while True:
        placed = _least_memory(setup, cache, cap)
        if isinstance(placed, np.ndarray):
            return placed
        if isinstance(placed, str) and placed == "too large":
            return None
        cap *= _MEMORY_GROWTH


def _least_memory(setup: BalanceSetup, cache: Cache, cap: float, *, proof: bool = False):
    """Least-memory placement among those whose relaxed memory stays within ``cap``.

    Returns the placement, ``"none"`` (proof that none fits ``cap``) or
    ``"too large"`` (the enumeration passed its budget, or met a chunk whose
    memory is not monotone). With ``proof=True`` it only decides ``"none"``
    or ``"maybe"``, and stages with such a chunk drop the overhead: a weaker
    lower bound that still proves ``"none"``.
    """
    total = int(setup.counts[0])
    stages = []
    for s in range(setup.stages):
        monotone = bool(monotone_chunks(setup, s).all())
        if not monotone and not proof:
            return "too large"
        per_layer = setup.param[0] + setup.once[0] + setup.in_flight[:, s].min() * setup.activation.min()
        most = min(total, _count_cap(cap - fixed_memory(setup, s), per_layer))
        combos = enumerate_stage(setup, cache, s, lambda c: (most, lambda n: np.inf), most, only_lightest=True,
                            overhead=monotone)
        if combos is None:
            return "too large"
        stages.append(subset(combos, combos.relaxed_mb <= cap + EPS))
    relaxed, _ = min_max([best_per_total(c.total, c.relaxed_mb, np.ones(len(c.total), bool), total + 1)[0]
                           for c in stages], total)
    if not np.isfinite(relaxed):
        return "none"
    if proof:
        return "maybe"
    best = [best_per_total(c.total, c.exact_mb, np.ones(len(c.total), bool), total + 1) for c in stages]
    _, totals = min_max([b for b, _ in best], total)
    return placement(setup, stages, [int(best[s][1][n]) for s, n in enumerate(totals)], cache)
