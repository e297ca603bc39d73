"""The knapsack core against brute force and an ILP (PuLP + HiGHS), at the bucket granularity."""

import itertools
import math

import numpy as np
import pulp
import pytest

from sappkit.errors import InputError
from sappkit.recompute.knapsack import (
    Group, budget_buckets, build_front, canonical, choose, least_times, suffix_fronts, to_buckets,
)


def _compositions(count, parts):
    """Every way to split ``count`` items over ``parts`` options."""
    for cut in itertools.combinations(range(count + parts - 1), parts - 1):
        edges = (-1, *cut, count + parts - 1)
        yield tuple(edges[i + 1] - edges[i] - 1 for i in range(parts))


def brute_force(groups, budget_mb, bucket_mb):
    """Least time and its counts, enumerating every count split of every group."""
    budget = math.floor(budget_mb / bucket_mb)
    weights = [[math.ceil(w / bucket_mb) for w in g.memory_mb] for g in groups]
    best, best_counts = math.inf, None
    for split in itertools.product(*(list(_compositions(g.count, g.memory_mb.size)) for g in groups)):
        weight = sum(x * w for counts, ws in zip(split, weights) for x, w in zip(counts, ws))
        time = sum(x * t for counts, g in zip(split, groups) for x, t in zip(counts, g.time))
        if weight <= budget and time < best - 1e-12:
            best, best_counts = time, split
    return best, best_counts


def ilp(groups, budget_mb, bucket_mb):
    """Least time by an integer program solved with HiGHS (None when infeasible)."""
    problem = pulp.LpProblem("knapsack", pulp.LpMinimize)
    x = {(g, j): problem.add_variable(f"x_{g}_{j}", 0, None, cat="Integer")
         for g, group in enumerate(groups) for j in range(group.memory_mb.size)}
    problem += pulp.lpSum(groups[g].time[j] * var for (g, j), var in x.items())
    for g, group in enumerate(groups):
        problem += pulp.lpSum(x[g, j] for j in range(group.memory_mb.size)) == group.count, f"all_placed_{g}"
    weights = {key: math.ceil(groups[key[0]].memory_mb[key[1]] / bucket_mb) for key in x}
    problem += pulp.lpSum(weights[key] * var for key, var in x.items()) <= math.floor(budget_mb / bucket_mb), "cap"
    status = problem.solve(pulp.HiGHS(msg=False))
    if pulp.LpStatus[status] != "Optimal":
        return None
    return pulp.value(problem.objective)


def random_groups(rng, *, fractional):
    groups = []
    for _ in range(rng.integers(1, 4)):
        options = int(rng.integers(1, 4))
        memory = rng.uniform(0, 30, options) if fractional else rng.integers(0, 30, options).astype(float)
        time = rng.integers(1, 20, options) + (rng.uniform(0, 1, options) if fractional else 0)
        groups.append(Group(count=int(rng.integers(0, 4)), memory_mb=memory, time=time))
    return groups


@pytest.mark.parametrize("fractional", [False, True])
@pytest.mark.parametrize("bucket_mb", [1.0, 0.5, 4.0])
def test_knapsack_equals_brute_force_and_ilp(rng, fractional, bucket_mb):
    for _ in range(12):
        groups = random_groups(rng, fractional=fractional)
        budget = float(rng.uniform(0, 80))
        expected, _ = brute_force(groups, budget, bucket_mb)
        counts = choose(groups, budget, bucket_mb=bucket_mb)
        assert (counts is None) == math.isinf(expected)
        solved = ilp(groups, budget, bucket_mb)
        assert (solved is None) == math.isinf(expected)
        if counts is None:
            continue
        assert [c.sum() for c in counts] == [g.count for g in groups]
        weight = sum((to_buckets(g.memory_mb, bucket_mb) * c).sum() for g, c in zip(groups, counts))
        assert weight <= budget_buckets(budget, bucket_mb)
        time = sum((g.time * c).sum() for g, c in zip(groups, counts))
        assert time == pytest.approx(expected, rel=1e-9)
        assert solved == pytest.approx(expected, rel=1e-9)
        assert least_times(groups, [budget], bucket_mb=bucket_mb)[0] == pytest.approx(expected, rel=1e-9)


def test_bucketing_rounds_memory_up_and_budget_down():
    assert to_buckets([0.0, 1.0, 1.01, 2.5], 1.0).tolist() == [0, 1, 2, 3]
    assert budget_buckets(9.99, 1.0) == 9 and budget_buckets(-0.5, 1.0) == -1
    # 3 items of 1.01 MB do not fit in 3.5 MB at a 1 MB granularity (each rounds to 2)...
    group = [Group(count=3, memory_mb=[1.01, 0.0], time=[1.0, 5.0])]
    assert choose(group, 3.5)[0].tolist() == [1, 2]
    # ...and do at 0.01 MB.
    assert choose(group, 3.5, bucket_mb=0.01)[0].tolist() == [3, 0]


def test_least_times_is_the_curve_of_single_choices(rng):
    for _ in range(10):
        groups = random_groups(rng, fractional=True)
        budgets = np.linspace(-5, 90, 40)
        curve = least_times(groups, budgets)
        assert np.all(curve[1:] <= curve[:-1] + 1e-9)
        for budget, time in zip(budgets, curve):
            assert time == pytest.approx(brute_force(groups, budget, 1.0)[0], rel=1e-9)


def test_suffix_fronts_answer_every_suffix(rng):
    for _ in range(10):
        groups = random_groups(rng, fractional=False)
        fronts = suffix_fronts(groups, cap_mb=60)
        assert len(fronts) == len(groups) + 1
        for start, front in enumerate(fronts):
            for budget in (0, 13, 37, 60):
                expected = brute_force(groups[start:], budget, 1.0)[0] if groups[start:] else 0.0
                assert front.least_time(budget) == pytest.approx(expected, rel=1e-9)
                counts = front.counts(budget)
                if counts is None:
                    assert math.isinf(expected)
                    continue
                assert all(c.sum() == 0 for c in counts[:start])
                assert sum((g.time * c).sum() for g, c in zip(groups, counts)) == pytest.approx(expected)


def test_cap_does_not_change_answers_below_it(rng):
    for _ in range(10):
        groups = random_groups(rng, fractional=True)
        whole = build_front(groups)
        capped = build_front(groups, cap_mb=40)
        budgets = np.arange(0, 41)
        assert np.array_equal(whole.least_times(budgets), capped.least_times(budgets))
        for budget in (10, 25, 40):
            left, right = whole.counts(budget), capped.counts(budget)
            assert (left is None) == (right is None)
            if left is not None:
                assert all(np.array_equal(a, b) for a, b in zip(left, right))


def test_front_is_strictly_pareto():
    front = build_front([Group(count=3, memory_mb=[5, 3, 1], time=[1.0, 2.0, 4.0])])
    assert np.all(np.diff(front.weight) > 0) and np.all(np.diff(front.time) < 0)
    assert front.least_time(2) == math.inf and front.least_time(3) == 12.0


def test_times_equal_up_to_rounding_are_one_time():
    # 0.1 + 0.2 and 0.3 differ in their last bit: the heavier option is no faster, so the lighter wins.
    group = [Group(count=1, memory_mb=[1, 2], time=[0.1 + 0.2, 0.3])]
    assert build_front(group).weight.tolist() == [1]
    assert choose(group, 10)[0].tolist() == [1, 0]


def test_canonical_order_gives_slower_options_first():
    group = Group(count=5, memory_mb=[9, 4, 1], time=[1.0, 2.0, 3.0])
    assert canonical(group, np.array([2, 1, 2])).tolist() == [2, 2, 1, 0, 0]
    tied = Group(count=3, memory_mb=[9, 4, 1], time=[2.0, 2.0, 1.0])
    assert canonical(tied, np.array([1, 1, 1])).tolist() == [1, 0, 2]


def test_empty_and_negative_budgets():
    groups = [Group(count=2, memory_mb=[3, 1], time=[1.0, 2.0])]
    assert choose(groups, -1.0) is None
    assert choose(groups, 1.0) is None
    assert least_times(groups, [-3.0, -1.0]).tolist() == [math.inf, math.inf]
    assert choose([], 5.0) == ()
    assert build_front([Group(count=0, memory_mb=[1], time=[1.0])]).least_time(0) == 0.0


@pytest.mark.parametrize("kwargs, message", [
    (dict(count=-1, memory_mb=[1], time=[1]), "count must be an int >= 0; got -1"),
    (dict(count=1.5, memory_mb=[1], time=[1]), "count must be an int >= 0; got 1.5"),
    (dict(count=1, memory_mb=[1, 2], time=[1]),
     "a group needs one memory and one time per option; got 2 memories and 1 times"),
    (dict(count=1, memory_mb=[], time=[]),
     "a group needs one memory and one time per option; got 0 memories and 0 times"),
    (dict(count=1, memory_mb=[-1.0], time=[1]), "group memory_mb must be finite numbers >= 0; got [-1.0]"),
    (dict(count=1, memory_mb=[1.0], time=[float("nan")]), "group time must be finite numbers >= 0; got [nan]"),
])
def test_group_refuses_bad_input(kwargs, message):
    with pytest.raises(InputError) as error:
        Group(**kwargs)
    assert str(error.value) == message


def test_choose_refuses_bad_bucket():
    with pytest.raises(InputError) as error:
        choose([], 5.0, bucket_mb=0)
    assert str(error.value) == "bucket_mb must be a finite number > 0; got 0"
