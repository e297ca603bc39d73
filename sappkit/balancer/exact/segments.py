"""Exact search for several body kinds in model order on one chunk: a DP over stages on the model position.

With one chunk a stage holds one cell, and the cells follow the model, so a
placement is where each stage's run of layers starts. A run ``[pos, pos +
n)`` holds a fixed number ``a_k`` of each kind (the end of one kind and the
start of the next when it spans a boundary); what remains to choose is the
options. Time grows with the summed backward ``B`` and memory with the
summed activation ``A`` (and, where the working set counts, with the working
set ``W`` of the run's last layer, which belongs to its last kind), so only
the run's *front* matters: the Pareto-optimal points of the Minkowski sum of
its kinds' fronts (:func:`run_front`).

Per stage and run the best value is the least stage time among the points
that fit the memory limit; the optimum is a DP over stages whose state is
the model position (min-max of the stage time: the ``sapp`` objective at
levels 0 and 1). Runs are listed up to a cap ``tau`` on a stage's time, grown until the optimum lies under it,
which proves it: a better placement would use only listed runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .cells import EPS, Cache, Front, _subset_fronts, _undominated, working_fronts
from ..setup import BalanceSetup
from .stage_bounds import fixed_memory

__all__ = ["why_not_applicable", "uneven_options", "search", "least_memory", "run_front", "run_times", "per_kind", "within"]

#: How the cap on a stage's value grows when no placement lies under it.
_GROWTH = 1.06


def why_not_applicable(setup: BalanceSetup) -> str:
    """Why the searches over several body kinds (this one on one chunk, :mod:`.boundary.search` on more) do not apply to
    ``setup`` ('' when they do)."""
    if setup.level >= 2:
        return "optimization_level >= 2"
    if setup.consistency is not None:
        return "recompute consistency between body kinds"
    return uneven_options(setup)


def uneven_options(setup: BalanceSetup) -> str:
    """The first body kind whose options differ in forward time or memory kept once, said as a reason a
    search over runs does not apply ('' when there is none): a run's forward and memory kept once must
    follow from its layers alone."""
    for kind in setup.kinds:
        index = setup.item_indices(kind)
        if np.ptp(setup.forward[index]) > 0 or np.ptp(setup.once[index]) > 0:
            return f"options of {kind!r} with different forward times or memory kept once"
    return ""


# ------------------------------------------------------------------ runs and their fronts


def _kind_front(setup: BalanceSetup, kind: int, n: int, cache: Cache, working: bool) -> Front:
    """Mixes of ``n`` layers of body kind ``kind``, mixes over every item; charging the working set of the
    last layer in the order a cell runs when ``working``."""
    items = setup.item_indices(setup.kinds[kind])
    if working:
        return working_fronts(setup, n, cache, items=items)[n]
    front = _subset_fronts(setup, items, n, cache, True)[n]
    mix = np.zeros((len(front.backward), len(setup.items)), dtype=int)
    mix[:, items] = front.mix
    return Front(front.backward, front.activation, mix, np.zeros(len(front.backward)))


def _lightest_kind(setup: BalanceSetup, kind: int, n: int, working: bool) -> Front:
    """Per working set a mix of ``n`` layers of ``kind`` with the least activation (what :meth:`Front.lightest`
    keeps of :func:`_kind_front`, found directly: the lightest option everywhere, or the layer ending warm-up
    on each option and the lightest allowed before it)."""
    order = [i for i in setup.cell_order if setup.kind_index[i] == kind]
    ends = order if working and n > 0 else [None]
    mix = np.zeros((len(ends), len(setup.items)), dtype=int)
    for row, last in enumerate(ends):
        allowed = order if last is None else order[: order.index(last) + 1]
        lightest = allowed[int(np.argmin(setup.activation[allowed]))]
        mix[row, lightest] += n if last is None else n - 1
        if last is not None:
            mix[row, last] += 1
    charged = np.zeros(len(ends)) if ends == [None] else setup.working[ends]
    return _undominated(mix @ setup.backward, mix @ setup.activation, mix, charged)


def _plus(a: Front, b: Front) -> Front:
    """The points of ``a`` ⊕ ``b`` no other point beats on backward, activation and working set at once."""
    return _undominated((a.backward[:, None] + b.backward[None, :]).ravel(),
                        (a.activation[:, None] + b.activation[None, :]).ravel(),
                        (a.mix[:, None, :] + b.mix[None, :, :]).reshape(-1, a.mix.shape[1]),
                        (a.charged()[:, None] + b.charged()[None, :]).ravel())


def run_front(setup: BalanceSetup, layers: tuple[int, ...], cache: Cache, working: bool,
              lightest: bool = False) -> Front:
    """The front of a run holding ``layers[k]`` layers of each body kind (the last kind present charging its
    working set when ``working``); with ``lightest`` only each kind's least-activation points per working
    set, all that memory alone needs.

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit.balancer.setup import make_setup
    >>> rows = [dict(kind=k, role="body", count=2, param_mb=1, option=o, forward_time=1, backward_time=bt,
    ...              activation_mb=a) for k in ("x", "y") for o, bt, a in (("none", 2, 50), ("full", 3, 5))]
    >>> setup = make_setup(pd.DataFrame(rows), stages=2, micro_batches=2, memory_mb=1e3, working_set=False)
    >>> front = run_front(setup, (1, 1), Cache(), working=False)
    >>> front.backward.tolist(), front.activation.tolist()
    ([4.0, 5.0, 6.0], [100.0, 55.0, 10.0])
    """
    cache.check_time()
    key = ("run", layers, working, lightest)
    if key not in cache.fronts:
        present = [k for k, n in enumerate(layers) if n > 0]
        front = Front(np.zeros(1), np.zeros(1), np.zeros((1, len(setup.items)), dtype=int), np.zeros(1))
        for k in present:
            last = working and k == present[-1]
            part = (_lightest_kind(setup, k, layers[k], last) if lightest
                    else _kind_front(setup, k, layers[k], cache, last))
            front = _plus(front, part)
        cache.fronts[key] = front
    return cache.fronts[key]


@dataclass(frozen=True)
class _Runs:
    """Every run a stage may take under a cap: its start, length, layers per kind and front."""

    start: np.ndarray
    length: np.ndarray
    layers: np.ndarray  # [run, kind]

    def composition(self, r: int) -> tuple[int, ...]:
        return tuple(int(n) for n in self.layers[r])


def _runs(setup: BalanceSetup, longest: int) -> _Runs:
    """Runs ``[pos, pos + n)`` of the model with ``n <= longest``."""
    total = int(setup.counts.sum())
    starts = np.r_[0, np.cumsum(setup.counts)[:-1]]
    pos, n = np.meshgrid(np.arange(total + 1), np.arange(min(longest, total) + 1), indexing="ij")
    inside = pos + n <= total
    pos, n = pos[inside], n[inside]
    ends = starts + setup.counts
    layers = np.maximum(0, np.minimum(pos[:, None] + n[:, None], ends) - np.maximum(pos[:, None], starts))
    return _Runs(pos, n, layers)


# ------------------------------------------------------------------ stage values


@dataclass
class _Table:
    """Per stage and run: the best value (inf where none fits or the cap excludes it) and the front point;
    ``complete`` when no run was left out."""

    runs: _Runs
    value: np.ndarray  # [stage, run]
    point: np.ndarray  # [stage, run]
    complete: bool

    @cached_property
    def ending(self) -> tuple[np.ndarray, np.ndarray]:
        """``(start, run)`` indexed ``[end, length]``: where a run ending at each position starts, and which
        run it is (-1 where none is listed)."""
        total = int(self.runs.start.max())
        lengths = np.arange(int(self.runs.length.max()) + 1)
        index = np.full((total + 1, len(lengths)), -1)
        index[self.runs.start, self.runs.length] = np.arange(len(self.runs.start))
        start = np.arange(total + 1)[:, None] - lengths[None, :]
        return np.maximum(start, 0), np.where(start >= 0, index[np.maximum(start, 0), lengths[None, :]], -1)


def per_kind(setup: BalanceSetup, values: np.ndarray) -> np.ndarray:
    """Per body kind, the least of ``values`` over its options."""
    return np.array([values[setup.item_indices(kind)].min() for kind in setup.kinds])


def within(value, cap: float):
    """``value <= cap`` up to the float rounding of sums (:data:`~sappkit.balancer.exact.cells.EPS`)."""
    return value <= cap + EPS * max(1.0, abs(cap))


def _stage_memory(setup: BalanceSetup, layers: np.ndarray, activation: np.ndarray, charged: np.ndarray) -> np.ndarray:
    """Memory ``[stage, point]`` of runs holding ``layers`` per kind whose points have these activations and
    working sets."""
    base = np.array([fixed_memory(setup, s) for s in range(setup.stages)])
    working = np.array([setup.working_set and s != setup.tail_ends_warm_up for s in range(setup.stages)])
    kept = layers @ per_kind(setup, setup.param + setup.once)
    return (base[:, None] + kept + setup.in_flight[0][:, None] * activation[None, :]
            + working[:, None] * charged[None, :])


def _least_memory(setup: BalanceSetup, runs: _Runs) -> np.ndarray:
    """Least memory ``[stage, run]`` of every run, in closed form: each kind on its lightest option, but the
    last kind present may end on any option (charging its working set) with the lightest allowed before it."""
    flight = setup.in_flight[0][:, None]
    lightest = per_kind(setup, setup.activation)
    plain = _stage_memory(setup, runs.layers, runs.layers @ lightest, np.zeros(len(runs.start)))
    if not setup.working_set:
        return plain
    present = runs.layers > 0
    last = np.where(present.any(axis=1), len(setup.kinds) - 1 - np.argmax(present[:, ::-1], axis=1), -1)
    extra = np.zeros_like(plain)
    for k in range(len(setup.kinds)):
        order = [i for i in setup.cell_order if setup.kind_index[i] == k]
        before = np.minimum.accumulate(setup.activation[order])
        n = runs.layers[:, k][None, :]
        ending = [flight * (setup.activation[j] + (n - 1) * before[q]) + setup.working[j] for q, j in enumerate(order)]
        extra = np.where(last[None, :] == k, np.min(ending, axis=0) - flight * n * lightest[k], extra)
    working = np.array([s != setup.tail_ends_warm_up for s in range(setup.stages)])
    return plain + working[:, None] * extra


def _table(setup: BalanceSetup, cache: Cache, cap: float, measure: str) -> _Table:
    """The stage values of every run that may stay within ``cap``: ``"time"`` F + B of its fastest point that
    fits the memory limit; ``"memory"`` its least memory, time ignored."""
    p = setup.stages
    fixed = setup.fixed_forward[0] + setup.fixed_backward[0]
    if measure == "time":
        per_layer, floor = per_kind(setup, setup.forward + setup.backward), float(fixed.min())
    else:
        per_layer = (per_kind(setup, setup.param + setup.once)
                     + setup.in_flight[0].min() * per_kind(setup, setup.activation))
        floor = min(fixed_memory(setup, s) for s in range(p))
    total = int(setup.counts.sum())
    cheapest = float(per_layer.min())
    longest = total if cheapest <= 0 or not np.isfinite(cap) else min(total, int((cap - floor) / cheapest + 1))
    runs = _runs(setup, max(longest, 0))
    listed = within(runs.layers @ per_layer + floor, cap)
    value = np.full((p, len(runs.start)), np.inf)
    point = np.full((p, len(runs.start)), -1)
    if measure == "memory":
        value[:, listed] = _least_memory(setup, runs)[:, listed]
    else:
        by_composition: dict[tuple[int, ...], list[int]] = {}
        for r in np.flatnonzero(listed):
            by_composition.setdefault(runs.composition(r), []).append(int(r))
        forward = per_kind(setup, setup.forward)
        for composition, members in by_composition.items():
            front = run_front(setup, composition, cache, working=setup.working_set)
            layers = np.array(composition)
            memory = _stage_memory(setup, layers, front.activation, front.charged())
            time = float(layers @ forward) + fixed[:, None] + front.backward[None, :]
            score = np.where(within(memory, setup.memory_mb) & within(time, cap), time, np.inf)
            best = score.argmin(axis=1)
            value[:, members] = score[np.arange(p), best][:, None]
            point[:, members] = best[:, None]
    empty = runs.length == 0
    for s in range(p):
        if (0, s) not in setup.reserved:
            value[s, empty] = np.inf
    return _Table(runs, value, point, complete=longest >= total and bool(listed.all()))


def run_times(setup: BalanceSetup, cache: Cache, cap: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every run of the model a stage may hold with its time ``F + B`` within ``cap``: ``(start, length,
    time, point)``, ``time`` and ``point`` indexed ``[stage, run]`` (inf and -1 where no content of the run
    fits the memory limit or the cap excludes it; ``point`` indexes :func:`run_front`)."""
    table = _table(setup, cache, cap, "time")
    return table.runs.start, table.runs.length, table.value, table.point


# ------------------------------------------------------------------ DPs over stages on the model position


def _dp(setup: BalanceSetup, table: _Table) -> tuple[float, list[int]]:
    """Least largest run value over placements ending at the model's last layer; the chosen run per stage."""
    total = int(setup.counts.sum())
    start, run = table.ending
    listed = run >= 0
    ends = np.arange(total + 1)
    best = np.full(total + 1, np.inf)
    best[0] = -np.inf
    choices = []
    for s in range(setup.stages):
        offered = np.where(listed, np.maximum(best[start], table.value[s][np.maximum(run, 0)]), np.inf)
        pick = offered.argmin(axis=1)
        best = offered[ends, pick]
        choices.append(run[ends, pick])
    if not np.isfinite(best[total]):
        return np.inf, []
    picks, end = [], total
    for chosen in reversed(choices):
        r = int(chosen[end])
        picks.append(r)
        end -= int(table.runs.length[r])
    return float(best[total]), picks[::-1]


def _placement(setup: BalanceSetup, table: _Table, picks: list[int], cache: Cache, lightest: bool) -> np.ndarray:
    """The counts of the picked runs: their chosen points, or (``lightest``) their least-memory points."""
    counts = np.zeros((len(setup.items), 1, setup.stages), dtype=int)
    for s, r in enumerate(picks):
        composition = table.runs.composition(r)
        front = run_front(setup, composition, cache, working=setup.working_set, lightest=lightest)
        point = table.point[s, r] if not lightest else int(
            _stage_memory(setup, np.array(composition), front.activation, front.charged())[s].argmin())
        counts[:, 0, s] = front.mix[point]
    return counts


def search(setup: BalanceSetup, cache: Cache) -> tuple[np.ndarray | None, float]:
    """The placement of least ``sapp`` objective and its value, or (None, inf) when no placement fits."""
    if not within(least_memory(setup, cache)[1], setup.memory_mb):
        return None, np.inf
    least = float(setup.counts @ per_kind(setup, setup.forward + setup.backward)
                  + setup.fixed_forward.sum() + setup.fixed_backward.sum())
    goal = least / setup.stages
    while True:
        table = _table(setup, cache, goal, "time")
        value, picks = _dp(setup, table)
        if picks and within(value, goal):
            return _placement(setup, table, picks, cache, lightest=False), value
        if np.isinf(goal):
            return None, np.inf
        # every run listed yet none under the cap: lift the cap (the least-memory placement fits, so one exists)
        goal = np.inf if table.complete and not picks else max(goal * _GROWTH, value if np.isfinite(value) else 0.0)


def least_memory(setup: BalanceSetup, cache: Cache) -> tuple[np.ndarray | None, float]:
    """The placement whose largest stage memory is least (time ignored) and that memory."""
    cap = setup.memory_mb
    while True:
        table = _table(setup, cache, cap, "memory")
        value, picks = _dp(setup, table)
        if picks and within(value, cap):
            return _placement(setup, table, picks, cache, lightest=True), value
        if table.complete:
            return None, np.inf
        cap = max(cap * 1.3, value if np.isfinite(value) else 0.0)
