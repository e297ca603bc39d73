"""Multiple-choice knapsack over groups of interchangeable items, exact at a memory granularity.

The model (one pipeline stage of the recompute chooser): group ``g`` holds
``n_g`` interchangeable items (layers); each item runs one of the group's
options ``j``, which keeps ``w_gj`` memory buckets and takes ``t_gj`` time.
Choose how many items of each group run each option, ``x_gj >= 0`` with
``sum_j x_gj = n_g``, to

    minimise  sum_gj t_gj x_gj   subject to   sum_gj w_gj x_gj <= W.

Memory comes in MB and is bucketed: an option's memory is rounded **up** to
whole buckets (:func:`to_buckets`) and the budget **down**
(:func:`budget_buckets`), so a bucketed fit is a fit in MB. At that
granularity the solution is exact.

Method: a Pareto front (the list-based dynamic program of Nemhauser and
Ullmann). Items are added one at a time; after each addition the front holds
every non-dominated (weight, time) pair of the items so far, lightest first,
with a back-pointer per pair. An addition is one vectorised step: every
(pair, option) sum, sorted by weight, kept where its time beats every lighter
sum by more than a relative 1e-12 (sums of the same times in another order
differ in their last bits). Pairs heavier than the largest budget asked for,
less the lightest the remaining items can weigh, are pruned. The front
answers every budget at once (:meth:`Front.least_times`: the time-saved
curve) and :func:`suffix_fronts` keeps the front of every suffix of the
groups (the offload search asks for each).

A group's chosen counts go to its items in canonical order
(:func:`canonical`): slower option first, items in their given order.

Every function takes :class:`Group` s or any objects with the same ``count``,
``memory_mb`` and ``time`` (the chooser passes its priced layer groups).

Examples
--------
>>> groups = [Group(count=2, memory_mb=[10, 4], time=[1.0, 3.0]), Group(count=1, memory_mb=[6, 1], time=[2.0, 5.0])]
>>> choose(groups, budget_mb=20)
(array([1, 1]), array([1, 0]))
>>> least_times(groups, [8, 14, 26, 100]).tolist()
[inf, 8.0, 4.0, 4.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .._check import check_int, check_number
from ..errors import InputError

__all__ = ["Group", "Front", "to_buckets", "budget_buckets", "build_front", "suffix_fronts", "choose",
           "least_times", "canonical"]

#: Times within this share of each other are one time.
ROUNDING = 1e-12


@dataclass(frozen=True, eq=False)
class Group:
    """Interchangeable items: ``count`` of them, each running one option.

    Parameters
    ----------
    count : int
        Items in the group (>= 0).
    memory_mb : array-like
        What one item keeps under each option, in MB (>= 0).
    time : array-like
        What one item takes under each option (>= 0), same length.
    """

    count: int
    memory_mb: np.ndarray
    time: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "count", check_int("count", self.count, minimum=0))
        memory = np.asarray(self.memory_mb, dtype=float).ravel()
        time = np.asarray(self.time, dtype=float).ravel()
        if memory.size == 0 or memory.size != time.size:
            raise InputError(f"a group needs one memory and one time per option; got {memory.size} memories "
                             f"and {time.size} times")
        for name, values in (("memory_mb", memory), ("time", time)):
            if not np.isfinite(values).all() or (values < 0).any():
                raise InputError(f"group {name} must be finite numbers >= 0; got {values.tolist()!r}")
        object.__setattr__(self, "memory_mb", memory)
        object.__setattr__(self, "time", time)


def to_buckets(memory_mb, bucket_mb: float) -> np.ndarray:
    """Memory in whole buckets, rounded up (so the buckets hold at least the memory)."""
    return np.ceil(np.asarray(memory_mb, dtype=float) / bucket_mb).astype(np.int64)


def budget_buckets(budget_mb: float, bucket_mb: float) -> int:
    """A budget in whole buckets, rounded down (negative when the budget is)."""
    return int(np.floor(budget_mb / bucket_mb))


@dataclass(frozen=True, eq=False)
class _Step:
    """One item added to a front: each new pair's parent pair and option."""

    group: int
    parent: np.ndarray
    option: np.ndarray


@dataclass(frozen=True, eq=False)
class Front:
    """The non-dominated (weight, time) pairs of some groups' items, with the way back to each.

    ``weight`` (buckets) rises and ``time`` falls strictly along the front.
    """

    weight: np.ndarray
    time: np.ndarray
    groups: tuple[Group, ...]
    _steps: tuple[_Step, ...] = field(repr=False)

    def least_time(self, budget: int) -> float:
        """The least time within ``budget`` buckets; ``inf`` when nothing fits."""
        return float(self.least_times(np.asarray([budget]))[0])

    def least_times(self, budgets) -> np.ndarray:
        """The least time within each of ``budgets`` (buckets); ``inf`` where nothing fits."""
        at = np.searchsorted(self.weight, np.asarray(budgets), side="right") - 1
        if not self.time.size:
            return np.full(at.shape, np.inf)
        return np.where(at >= 0, self.time[np.maximum(at, 0)], np.inf)

    def counts(self, budget: int) -> tuple[np.ndarray, ...] | None:
        """Per group, how many items run each option at the least time within ``budget``; None if none fits."""
        at = int(np.searchsorted(self.weight, budget, side="right")) - 1
        if at < 0:
            return None
        counts = [np.zeros(group.memory_mb.size, dtype=int) for group in self.groups]
        for step in reversed(self._steps):
            counts[step.group][step.option[at]] += 1
            at = int(step.parent[at])
        return tuple(counts)


def _lightest(groups: Sequence[Group], bucket_mb: float) -> np.ndarray:
    return np.array([group.count * to_buckets(group.memory_mb, bucket_mb).min() for group in groups], dtype=np.int64)


def _fronts(groups: Sequence[Group], bucket_mb: float, cap: int | None, order: Sequence[int],
            lookahead: bool) -> list[Front]:
    """Add the groups' items in ``order``; return the front after each group."""
    weight, time = np.zeros(1, dtype=np.int64), np.zeros(1)
    steps: list[_Step] = []
    fronts = []
    still = _lightest(groups, bucket_mb)
    remaining = int(still.sum()) if lookahead else 0
    for g in order:
        group = groups[g]
        option_weight = to_buckets(group.memory_mb, bucket_mb)
        lightest = int(option_weight.min())
        for _ in range(group.count):
            if lookahead:
                remaining -= lightest
            limit = None if cap is None else cap - remaining
            weight, time, parent, option = _add_item(weight, time, option_weight, group.time, limit)
            steps.append(_Step(g, parent, option))
        fronts.append(Front(weight, time, tuple(groups), tuple(steps)))
    return fronts


def _add_item(weight, time, option_weight, option_time, limit):
    """One item more: every (pair, option) sum, kept where it beats every lighter sum."""
    k = option_weight.size
    sum_weight = (weight[:, None] + option_weight[None, :]).ravel()
    sum_time = (time[:, None] + option_time[None, :]).ravel()
    if limit is not None:
        index = np.flatnonzero(sum_weight <= limit)
        sum_weight, sum_time = sum_weight[index], sum_time[index]
    else:
        index = np.arange(sum_weight.size)
    if not sum_weight.size:
        return sum_weight, sum_time, index, index
    # lexsort is stable: of equal (weight, time) sums the first (lower pair, then option) stays first.
    order = np.lexsort((sum_time, sum_weight))
    sum_weight, sum_time, index = sum_weight[order], sum_time[order], index[order]
    best = np.minimum.accumulate(sum_time)
    before = np.concatenate(([np.inf], best[:-1]))
    keep = sum_time < before - ROUNDING * np.where(np.isfinite(before), np.abs(before), 0.0)
    return sum_weight[keep], sum_time[keep], index[keep] // k, index[keep] % k


def build_front(groups: Sequence[Group], *, bucket_mb: float = 1.0, cap_mb: float | None = None) -> Front:
    """The front of all ``groups`` together, pruned to budgets up to ``cap_mb`` (all budgets when None).

    Examples
    --------
    >>> front = build_front([Group(count=2, memory_mb=[3, 1], time=[1.0, 2.0])])
    >>> front.weight.tolist(), front.time.tolist()
    ([2, 4, 6], [4.0, 3.0, 2.0])
    """
    groups = tuple(groups)
    bucket_mb = check_number("bucket_mb", bucket_mb, minimum=0, strict=True)
    cap = None if cap_mb is None else budget_buckets(cap_mb, bucket_mb)
    if not groups:
        return Front(np.zeros(1, dtype=np.int64), np.zeros(1), (), ())
    return _fronts(groups, bucket_mb, cap, range(len(groups)), lookahead=True)[-1]


def suffix_fronts(groups: Sequence[Group], *, bucket_mb: float = 1.0, cap_mb: float | None = None) -> list[Front]:
    """The front of ``groups[i:]`` for every ``i`` (the last entry, for ``i = len(groups)``, is empty).

    Examples
    --------
    >>> fronts = suffix_fronts([Group(count=1, memory_mb=[5, 1], time=[1.0, 4.0])] * 2)
    >>> [front.least_time(6) for front in fronts]
    [5.0, 1.0, 0.0]
    """
    groups = tuple(groups)
    bucket_mb = check_number("bucket_mb", bucket_mb, minimum=0, strict=True)
    cap = None if cap_mb is None else budget_buckets(cap_mb, bucket_mb)
    empty = Front(np.zeros(1, dtype=np.int64), np.zeros(1), groups, ())
    fronts = _fronts(groups, bucket_mb, cap, range(len(groups) - 1, -1, -1), lookahead=False)
    return [*reversed(fronts), empty]


def choose(groups: Sequence[Group], budget_mb: float, *, bucket_mb: float = 1.0) -> tuple[np.ndarray, ...] | None:
    """Per group, how many items run each option at the least time within ``budget_mb``; None if none fits."""
    bucket_mb = check_number("bucket_mb", bucket_mb, minimum=0, strict=True)
    budget = budget_buckets(check_number("budget_mb", budget_mb), bucket_mb)
    if budget < 0:
        return None
    return build_front(groups, bucket_mb=bucket_mb, cap_mb=budget * bucket_mb).counts(budget)


def least_times(groups: Sequence[Group], budgets_mb, *, bucket_mb: float = 1.0) -> np.ndarray:
    """The least time within each budget in MB (``inf`` where nothing fits): one front, every budget."""
    bucket_mb = check_number("bucket_mb", bucket_mb, minimum=0, strict=True)
    budgets = np.floor(np.asarray(budgets_mb, dtype=float) / bucket_mb).astype(np.int64)
    cap = int(budgets.max()) if budgets.size else 0
    if cap < 0:
        return np.full(budgets.shape, np.inf)
    return build_front(groups, bucket_mb=bucket_mb, cap_mb=cap * bucket_mb).least_times(budgets)


def canonical(group: Group, counts: np.ndarray) -> np.ndarray:
    """The option of each of a group's items, in item order: slower options first.

    Ties in time go to the lighter option first, then to the earlier option.

    Examples
    --------
    >>> canonical(Group(count=3, memory_mb=[9, 1], time=[1.0, 3.0]), np.array([2, 1])).tolist()
    [1, 0, 0]
    """
    order = np.lexsort((np.arange(group.time.size), group.memory_mb, -group.time))
    return np.repeat(order, np.asarray(counts)[order])
