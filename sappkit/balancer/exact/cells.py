"""The exact search's building blocks: cell contents worth considering, stage enumerations, stage DPs.

For one body kind whose options share a forward time, a cell holding ``n``
layers is a *mix* of options with summed backward ``B`` and activation
``A``. Where a stage's memory grows with the cell's activation, only mixes
on the Pareto front of (``B``, ``A``) matter (:func:`pareto_fronts`);
elsewhere every distinct mix does. With the working set, stage memory is
the peak over its memory events (:mod:`sappkit.balancer.peaks`), monotone
in every cell, and a cell whose backward runs at an event charges the
working set ``W`` of its last layer (the last present in the order a cell's
layers run), so its mixes are grouped by that layer's option and fronts
kept per group (:func:`working_fronts`). :func:`enumerate_stage` lists a stage's
products of cell contents under caps, each with its relaxed and exact
memory; :func:`min_max` combines per-stage tables over
``Σ n_s = L``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..setup import BalanceSetup
from .result import SearchTimeout
from .stage_bounds import charged_chunks, memory_bounds, monotone_chunks

__all__ = ["Cache", "Combos", "Front", "COMBO_BUDGET", "EPS", "best_per_total", "cell_fronts", "enumerate_stage",
           "kind_fronts", "min_max", "pareto_fronts", "placement", "split_values", "stage_time", "subset",
           "working_fronts"]

#: Stage enumerations larger than this hand the instance to the integer program.
COMBO_BUDGET = 400_000
#: (row, choice) pairs a stage enumeration forms at once: a cell of many choices meets its rows a block at a time.
_PAIRS = 1 << 20
#: Relative tolerance of comparisons between sums of floats.
EPS = 1e-9


@dataclass
class Cache:
    """Fronts and stage enumerations, reusable across memory limits and objectives of one instance.

    :meth:`bind` empties the stage enumerations when the instance changes, so a cache never serves another's;
    ``deadline`` (:func:`time.monotonic`, or None) bounds a search (:meth:`check_time`); ``split_budget`` the
    bounds the ``m = p`` split search tries before it answers unproven (None: its own).
    """

    fronts: dict = field(default_factory=dict)
    stages: dict = field(default_factory=dict)
    instance: tuple = ()
    deadline: float | None = None
    split_budget: int | None = None

    def check_time(self) -> None:
        """Raise :class:`SearchTimeout` past the deadline (called as each stage, cell or round is worked out)."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise SearchTimeout

    def bind(self, setup: BalanceSetup) -> Cache:
        """Use this cache for ``setup``: keep what it holds only if it was built for the same instance."""
        instance = (setup.schedule, setup.stages, setup.slices, setup.chunks, setup.less_memory, setup.level,
                    setup.const_mb, setup.items, setup.working_set, setup.sapp_compat,
                    *(tuple(a) for a in (setup.forward, setup.backward, setup.activation, setup.param, setup.once,
                                         setup.working)),
                    setup.fixed)
        if instance != self.instance:
            self.stages.clear()
            self.instance = instance
        return self


# ------------------------------------------------------------------ fronts
@dataclass(frozen=True)
class Front:
    """Pareto-optimal mixes of ``n`` layers: backward ascending, activation descending."""

    backward: np.ndarray
    activation: np.ndarray
    mix: np.ndarray
    """Layers per option, one row per point."""
    working: np.ndarray | None = None
    """Per point, the working set it charges (:func:`working_fronts`); None: none."""

    def charged(self) -> np.ndarray:
        """The working set each point charges (zeros for a plain front)."""
        return np.zeros(len(self.backward)) if self.working is None else self.working

    def lightest(self) -> list[int]:
        """Per working-set value, the point with the least activation: all memory needs when it grows with both."""
        working = self.charged()
        return [int(np.flatnonzero(working == w)[np.argmin(self.activation[working == w])])
                for w in np.unique(working)]


def _pareto(backward, activation, mix) -> Front:
    order = np.lexsort((activation, backward))
    backward, activation, mix = backward[order], activation[order], mix[order]
    best_before = np.minimum.accumulate(np.r_[np.inf, activation[:-1]])
    keep = activation < best_before - EPS * np.maximum(1.0, np.abs(activation))
    return Front(backward[keep], activation[keep], mix[keep])


def pareto_fronts(backward: np.ndarray, activation: np.ndarray, n_max: int, known: list | None = None) -> list[Front]:
    """Fronts for 0..``n_max`` layers of one kind (extending ``known`` in place when given).

    Examples
    --------
    >>> fronts = pareto_fronts(np.array([2.0, 3.0]), np.array([50.0, 5.0]), 2)
    >>> fronts[2].backward.tolist(), fronts[2].activation.tolist(), fronts[2].mix.tolist()
    ([4.0, 5.0, 6.0], [100.0, 55.0, 10.0], [[2, 0], [1, 1], [0, 2]])
    """
    return _grow(backward, activation, n_max, known if known is not None else [], _pareto)


def _distinct(backward, activation, mix, working=None) -> Front:
    """Every distinct (backward, activation, working set) of the mixes, one mix each, ordered as a front is."""
    charged = np.zeros(len(backward)) if working is None else working
    order = np.lexsort((charged, activation, backward))
    backward, activation, mix, charged = backward[order], activation[order], mix[order], charged[order]
    keep = np.r_[True, (np.diff(backward) > EPS) | (np.abs(np.diff(activation)) > EPS) | (np.diff(charged) > EPS)]
    return Front(backward[keep], activation[keep], mix[keep], None if working is None else charged[keep])


def _distinct_fronts(backward: np.ndarray, activation: np.ndarray, n_max: int, known: list) -> list[Front]:
    """Every distinct mix for 0..``n_max`` layers (extending ``known`` in place)."""
    return _grow(backward, activation, n_max, known, _distinct)


def _grow(backward: np.ndarray, activation: np.ndarray, n_max: int, known: list, reduce) -> list[Front]:
    """Extend ``known`` to 0..``n_max`` layers: each count's mixes are the last count's plus one option,
    kept as ``reduce`` (the Pareto front, or every distinct mix) says."""
    if not known:
        known.append(Front(np.zeros(1), np.zeros(1), np.zeros((1, len(backward)), dtype=int)))
    eye = np.eye(len(backward), dtype=int)
    while len(known) <= n_max:
        last = known[-1]
        known.append(reduce((last.backward[:, None] + backward[None, :]).ravel(),
                            (last.activation[:, None] + activation[None, :]).ravel(),
                            (last.mix[:, None, :] + eye[None, :, :]).reshape(-1, len(backward))))
    return known


def kind_fronts(setup: BalanceSetup, n_max: int, cache: Cache, *, monotone: bool = True) -> list[Front]:
    """Cell contents worth considering for 0..``n_max`` layers: the Pareto fronts, or every distinct mix
    for a chunk whose memory is not monotone."""
    key = (tuple(setup.backward), tuple(setup.activation), monotone)
    known = cache.fronts.setdefault(key, [])
    if monotone:
        return pareto_fronts(setup.backward, setup.activation, n_max, known)
    return _distinct_fronts(setup.backward, setup.activation, n_max, known)


def working_fronts(setup: BalanceSetup, n_max: int, cache: Cache, *, monotone: bool = True,
                   items: list[int] | None = None) -> list[Front]:
    """Contents of a last-chunk cell whose layer ending warm-up charges its working set, for 0..``n_max`` layers
    (of the ``items`` given, e.g. one body kind's; default every item).

    The mixes whose last present item (in :attr:`BalanceSetup.cell_order`) is
    ``j`` are one layer of ``j`` plus ``n - 1`` layers of ``j`` and the items
    before it; each such group keeps its own fronts (or distinct mixes), its
    points charging ``j``'s working set. Across groups, monotone memory drops
    the points another beats on backward, activation and working set at once.

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit.balancer.setup import make_setup
    >>> rows = [dict(kind="b", role="body", count=2, param_mb=1, option=o, forward_time=1, backward_time=bt,
    ...              activation_mb=a, working_mb=w) for o, bt, a, w in (("none", 2, 50, 9), ("full", 3, 5, 1))]
    >>> setup = make_setup(pd.DataFrame(rows), stages=2, micro_batches=2, memory_mb=1e3, working_set=True)
    >>> front = working_fronts(setup, 2, Cache())[2]
    >>> front.mix.tolist(), front.working.tolist()
    ([[2, 0], [1, 1], [0, 2]], [59.0, 59.0, 51.0])
    """
    order = [i for i in setup.cell_order if items is None or i in items]
    key = ("working", tuple(setup.backward), tuple(setup.activation), tuple(setup.working), monotone, tuple(order))
    known = cache.fronts.setdefault(key, [])
    width = len(setup.items)
    while len(known) <= n_max:
        n = len(known)
        if n == 0:
            known.append(Front(np.zeros(1), np.zeros(1), np.zeros((1, width), dtype=int), np.zeros(1)))
            continue
        groups = []
        for position, last in enumerate(order):
            allowed = order[: position + 1]
            before = _subset_fronts(setup, allowed, n - 1, cache, monotone)[n - 1]
            mix = np.zeros((len(before.backward), width), dtype=int)
            mix[:, allowed] = before.mix
            mix[:, last] += 1
            groups.append((before.backward + setup.backward[last], before.activation + setup.activation[last], mix,
                           np.full(len(before.backward), setup.working[last])))
        backward, activation, mix, working = (np.concatenate(parts) for parts in zip(*groups))
        known.append(_undominated(backward, activation, mix, working) if monotone
                     else _distinct(backward, activation, mix, working))
    return known


def _subset_fronts(setup: BalanceSetup, allowed: list[int], n_max: int, cache: Cache, monotone: bool) -> list[Front]:
    """Fronts (or distinct mixes) of the items ``allowed`` alone, their mixes over those items."""
    key = ("subset", tuple(setup.backward[allowed]), tuple(setup.activation[allowed]), monotone)
    known = cache.fronts.setdefault(key, [])
    if monotone:
        return pareto_fronts(setup.backward[allowed], setup.activation[allowed], n_max, known)
    return _distinct_fronts(setup.backward[allowed], setup.activation[allowed], n_max, known)


def _undominated(backward, activation, mix, working) -> Front:
    """The points no other beats (or equals) on backward, activation and working set, ordered as a front is.

    Per working-set value the Pareto front of (backward, activation); a point
    then falls when a front of a smaller working set has a point at most as
    slow and at most as heavy (its least activation up to that backward).
    """
    groups = [_pareto(backward[working == w], activation[working == w], mix[working == w])
              for w in np.unique(working)]
    kept = []
    for g, (w, group) in enumerate(zip(np.unique(working), groups)):
        beaten = np.zeros(len(group.backward), dtype=bool)
        for lighter in groups[:g]:
            before = np.searchsorted(lighter.backward, group.backward, side="right") - 1
            tol = EPS * np.maximum(1.0, np.abs(group.activation))
            beaten |= (before >= 0) & (lighter.activation[np.maximum(before, 0)] <= group.activation + tol)
        keep = ~beaten
        kept.append((group.backward[keep], group.activation[keep], group.mix[keep], np.full(keep.sum(), w)))
    backward, activation, mix, working = (np.concatenate(parts) for parts in zip(*kept))
    order = np.lexsort((working, activation, backward))
    return Front(backward[order], activation[order], mix[order], working[order])


def cell_fronts(setup: BalanceSetup, s: int, n_max, cache: Cache, monotone=None) -> list[list[Front]]:
    """Per chunk of stage ``s``, the contents it may hold up to ``n_max[c]`` layers: :func:`kind_fronts`, and
    :func:`working_fronts` for the cells whose working set a memory event charges (:func:`charged_chunks`)."""
    n_max = np.broadcast_to(np.minimum(n_max, int(setup.counts[0])), (setup.chunks,))
    monotone = monotone_chunks(setup, s) if monotone is None else monotone
    charged = charged_chunks(setup, s)
    return [(working_fronts if c in charged else kind_fronts)(setup, max(int(n), 0), cache, monotone=bool(flag))
            for c, (n, flag) in enumerate(zip(n_max, monotone))]


# ------------------------------------------------------------------ stage enumeration
@dataclass(frozen=True)
class Combos:
    """Every enumerated content of one stage: per combo its cells' layers, backward, activation, point."""

    layers: np.ndarray       # [combo, chunk]
    backward: np.ndarray     # [combo, chunk], head/tail included
    activation: np.ndarray   # [combo, chunk]
    point: np.ndarray        # [combo, chunk] index into the cell's front
    working: np.ndarray      # [combo, chunk] working set the cell's point charges
    relaxed_mb: np.ndarray
    exact_mb: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.layers.sum(axis=1)


def _cell_choices(setup, fronts, s, c, cap_layers, cap_backward, only_lightest):
    """(layers, backward, activation, point, working) of the front points a cell may take under the caps.

    ``only_lightest`` keeps the least-activation point per layer count and
    working set (enough when memory is all that matters and the cell is
    monotone).
    """
    low = 0 if (c, s) in setup.reserved else 1
    rows = []
    for n in range(low, min(cap_layers, len(fronts) - 1) + 1):
        front = fronts[n]
        points = front.lightest() if only_lightest else range(len(front.backward))
        limit = cap_backward(n) + EPS
        working = front.charged()
        for j in points:
            b = front.backward[j] + setup.fixed_backward[c, s]
            if b <= limit:
                rows.append((n, b, front.activation[j], j, working[j]))
    return np.array(rows, dtype=float).reshape(-1, 5)


def enumerate_stage(setup, cache, s, cell_caps, max_total, only_lightest=False, time_cap=None,
               overhead=True, budget=COMBO_BUDGET) -> Combos | None:
    """Products of the cells' choices with at most ``max_total`` layers; None past ``budget`` products.

    ``time_cap`` prunes partial products as soon as their stage time (max
    forward + max backward) exceeds it; it only grows as cells are added.
    """
    cache.check_time()
    monotone = monotone_chunks(setup, s) | (not overhead)
    caps = [cell_caps(c) for c in range(setup.chunks)]
    cells = cell_fronts(setup, s, [min(cap, max_total) for cap, _ in caps], cache, monotone)
    parts = [_cell_choices(setup, cells[c], s, c, *caps[c], only_lightest and monotone[c])
             for c in range(setup.chunks)]
    rows, totals = np.zeros((1, 0), dtype=int), np.zeros(1, dtype=int)
    most_forward, most_backward = np.zeros(1), np.zeros(1)
    for c, part in enumerate(parts):  # the kept (row, choice) pairs, a block of rows at a time (never the product)
        forward, block, kept, pairs = setup.forward[0] * part[:, 0] + setup.fixed_forward[c, s], \
            max(1, _PAIRS // max(len(part), 1)), 0, [(np.zeros(0, dtype=int), np.zeros(0, dtype=int))]
        for start in range(0, len(rows), block):
            left = np.repeat(np.arange(start, min(start + block, len(rows))), len(part))
            right = np.tile(np.arange(len(part)), min(block, len(rows) - start))
            keep = totals[left] + part[right, 0].astype(int) <= max_total
            if time_cap is not None:
                keep &= (np.maximum(most_forward[left], forward[right]) + np.maximum(most_backward[left],
                         part[right, 1]) <= time_cap + EPS * max(1.0, abs(time_cap)))
            pairs.append((left[keep], right[keep]))
            kept += int(keep.sum())
            if kept > budget:
                return None
        left, right = (np.concatenate(side) for side in zip(*pairs))
        most_forward, most_backward = np.maximum(most_forward[left], forward[right]), \
            np.maximum(most_backward[left], part[right, 1])
        rows, totals = np.column_stack([rows[left], right]), totals[left] + part[right, 0].astype(int)
    picked = [part[rows[:, c]] for c, part in enumerate(parts)] if len(rows) else [np.zeros((0, 5))] * len(parts)
    layers, backward, activation, point, working = (np.stack([p[:, k] for p in picked], axis=1) for k in range(5))
    relaxed, exact = memory_bounds(setup, s, layers, activation, working, overhead)
    return Combos(layers.astype(np.int64), backward, activation, point.astype(np.int64), working, relaxed, exact)


def subset(combos: Combos, keep: np.ndarray) -> Combos:
    return Combos(*(getattr(combos, name)[keep] for name in Combos.__dataclass_fields__))


def _forward(setup: BalanceSetup, s: int, combos: Combos) -> np.ndarray:
    return setup.forward[0] * combos.layers + setup.fixed_forward[:, s]


def split_values(setup: BalanceSetup, s: int, combos: Combos) -> tuple[np.ndarray, np.ndarray]:
    """(S, L) of the split objective for every combo of stage ``s``."""
    v = setup.chunks
    first = combos.backward[:, : v - 1].max(axis=1)
    factor = setup.last_chunk_factors[s] / setup.slices
    last = (combos.backward[:, v - 1] + setup.fixed_forward[v - 1, s]
            + factor * setup.forward[0] * combos.layers[:, v - 1])
    return first, last


def stage_time(setup: BalanceSetup, s: int, combos: Combos) -> np.ndarray:
    """The stage time ``max_c F + max_c B`` of every combo of stage ``s``."""
    return _forward(setup, s, combos).max(axis=1) + combos.backward.max(axis=1)


# ------------------------------------------------------------------ dynamic programs over stages
def best_per_total(totals, values, feasible, width):
    """Per stage total ``n``: the least value among feasible combos and its combo index."""
    best = np.full(width, np.inf)
    pick = np.full(width, -1)
    ok = np.flatnonzero(feasible)
    if ok.size:
        order = ok[np.lexsort((values[ok], totals[ok]))]
        first = np.r_[True, totals[order][1:] != totals[order][:-1]]
        chosen = order[first]
        best[totals[chosen]] = values[chosen]
        pick[totals[chosen]] = chosen
    return best, pick


def min_max(tables: list[np.ndarray], total: int) -> tuple[float, list[int]]:
    """min over Σ n_s = total of max_s table_s[n_s], and the n_s (a dynamic program over the stages).

    Examples
    --------
    >>> min_max([np.array([np.inf, 1.0, 5.0]), np.array([0.0, 2.0, 3.0])], 2)
    (2.0, [1, 1])
    """
    best = np.full(total + 1, np.inf)
    best[0] = -np.inf
    columns = np.arange(total + 1)
    choices = []
    for table in tables:
        ks = np.flatnonzero(np.isfinite(table[: total + 1]))
        if not ks.size:
            return np.inf, []
        source = columns[None, :] - ks[:, None]
        shifted = np.where(source >= 0, best[np.maximum(source, 0)], np.inf)
        candidate = np.maximum(shifted, table[ks][:, None])
        row = candidate.argmin(axis=0)
        choices.append(ks[row])
        best = candidate[row, columns]
    return float(best[total]), _walk_back(choices, total) if np.isfinite(best[total]) else []


def _walk_back(choices, total) -> list[int]:
    picked, left = [], total
    for choice in reversed(choices):
        n = int(choice[left])
        picked.append(n)
        left -= n
    return picked[::-1]


def placement(setup: BalanceSetup, combos: list[Combos], picks: list[int], cache: Cache) -> np.ndarray:
    """The placement of the chosen combo on every stage."""
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    for s, index in enumerate(picks):
        cells = cell_fronts(setup, s, combos[s].layers.max(axis=0, initial=0), cache)
        for c in range(setup.chunks):
            counts[:, c, s] = cells[c][combos[s].layers[index, c]].mix[combos[s].point[index, c]]
    return counts
