"""The step objective's search against brute force on tiny instances and an independent search on small ones.

The references here do not share the balancer's step timer or its validity
check: the brute force simulates every placement with :func:`sappkit.simulate`
(costs summed here from the layer counts) and judges memory by the balancer's
model (:func:`~sappkit.balancer.evaluate.stage_memory`, tested on its own); the cell, frontier and consistency
rules are written out again.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import sappkit
from sappkit.balancer.evaluate import stage_memory
from sappkit.balancer.step.known_memory import KnownMemory
from sappkit.balancer.step.local_search import Changes, _descend, _kick, improve
from sappkit.balancer.step.moves import applied, candidate_changes, valid, valid_changes
from sappkit.balancer.setup import make_setup
from sappkit.balancer.step.steptime import step_timer

from ..test_optimise import loose_limit, placements, table


def simulated(setup, counts) -> float:
    """The step time of ``counts`` by the simulator, from cell costs summed here."""
    forward = np.tensordot(setup.forward, counts, axes=(0, 0)) + setup.fixed_forward
    backward = np.tensordot(setup.backward, counts, axes=(0, 0)) + setup.fixed_backward
    v, p = forward.shape
    costs = pd.DataFrame(dict(stage=np.tile(np.arange(p), v), chunk=np.repeat(np.arange(v), p),
                              forward_time=forward.ravel(), backward_time=backward.ravel(), activation_mb=1.0))
    return sappkit.simulate(costs, schedule=setup.schedule, micro_batches=setup.micro_batches,
                            less_memory=setup.less_memory, static_mb=0).step_time


def allowed(setup, counts) -> bool:
    """Every non-reserved cell holds a layer, kinds keep model order, MindFormers' consistency, memory fits."""
    p, v = setup.stages, setup.chunks
    occupied = counts.sum(axis=0)
    if any(occupied[c, s] == 0 for c, s in itertools.product(range(v), range(p))
           if (c, s) not in ({(0, 0), (1, 0)} if setup.schedule == "dualpipev" else {(0, 0), (v - 1, p - 1)})):
        return False
    order = [(c, s) for c in range(v) for s in (range(p - 1, -1, -1) if setup.schedule == "dualpipev" and c == 1
                                                 else range(p))]
    by_kind = [counts[setup.item_indices(kind)].sum(axis=0) for kind in setup.kinds]
    for k in range(1, len(setup.kinds)):
        for c, s in order:
            before = ([(0, t) for t in range(p)] + [(1, t) for t in range(s, p)]
                      if setup.schedule == "dualpipev" and c == 1 else order[:order.index((c, s))])
            if sum(by_kind[k][d, t] for d, t in before) > 0 and by_kind[k - 1][c, s] > 0:
                return False
    if setup.consistency is not None:
        least, most = setup.consistency
        for k, kind in enumerate(setup.kinds[:-1]):
            plain = [i for i, item in enumerate(setup.items) if item == (kind, least)]
            later = [i for i, (other, o) in enumerate(setup.items) if o == most and setup.kinds.index(other) > k]
            if plain and later and ((counts[later].sum(axis=0) > 0) & (counts[plain[0]] > 0)).any():
                return False
    memory = stage_memory(setup, np.moveaxis(counts, -1, 0), np.arange(p)).total
    return bool((memory <= setup.memory_mb * (1 + 1e-9) + 1e-6).all())


def every_placement(setup):
    """Every placement of the body layers (kinds placed independently), as ``[item, chunk, stage]`` arrays."""
    per_kind = []
    for k, kind in enumerate(setup.kinds):
        items = setup.item_indices(kind)
        per_kind.append([(items, flat.reshape(len(items), setup.chunks, setup.stages))
                         for flat in placements(int(setup.counts[k]), len(items) * setup.chunks * setup.stages)])
    for combination in itertools.product(*per_kind):
        counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
        for items, part in combination:
            counts[items] = part
        yield counts


#: (pipeline, layers per kind, memory limit as a share of the loose limit): small enough to simulate every placement.
TINY = [
    (dict(stages=2, micro_batches=4), (7,), 0.8),
    (dict(stages=3, micro_batches=3), (5,), 1.0),
    (dict(stages=2, micro_batches=5), (4,), 0.8),
    (dict(stages=2, micro_batches=4, chunks=2), (4,), 1.0),
    (dict(stages=2, micro_batches=4, chunks=2, schedule="dualpipev"), (5,), 0.8),
    (dict(stages=2, micro_batches=3), (2, 3), 1.0),
]


@pytest.mark.parametrize("pipeline, counts, scale", TINY, ids=lambda x: str(x))
def test_the_step_plan_is_the_fastest_placement(rng, pipeline, counts, scale):
    frame = table(rng, kinds=len(counts), counts=counts, options=("none", "full"),
                  modules=["m"] * len(counts))
    limit = loose_limit(frame, **pipeline) * scale
    setup = make_setup(frame, memory_mb=limit, objective="step", working_set=False, **pipeline)
    times = [simulated(setup, counts) for counts in every_placement(setup) if allowed(setup, counts)]
    plan = sappkit.balance(frame, memory_mb=limit, objective="step", working_set=False, **pipeline)
    if not times:
        assert plan.status == "infeasible"
        return
    best = min(times)
    assert plan.step_time == pytest.approx(best, rel=1e-9)
    assert plan.lower_bound <= best * (1 + 1e-9)
    assert plan.status == ("optimal" if plan.gap <= 1e-6 else "feasible")


def independent_search(setup, start, rng, rounds=150) -> float:
    """A plain randomised search: one random change at a time (a layer to any cell and option of its kind),
    kept when it fits and simulates no slower."""
    counts, best = start.copy(), simulated(setup, start)
    for _ in range(rounds):
        trial = counts.copy()
        kind = setup.kinds[rng.integers(len(setup.kinds))]
        items = setup.item_indices(kind)
        held = [(i, c, s) for i in items for c, s in itertools.product(range(setup.chunks), range(setup.stages))
                if trial[i, c, s] > 0]
        i, c, s = held[rng.integers(len(held))]
        trial[i, c, s] -= 1
        trial[rng.choice(items), rng.integers(setup.chunks), rng.integers(setup.stages)] += 1
        if allowed(setup, trial):
            time = simulated(setup, trial)
            if time <= best:
                counts, best = trial, time
    return best


@pytest.mark.parametrize("pipeline", [dict(stages=4, micro_batches=4), dict(stages=4, micro_batches=8),
                                      dict(stages=3, micro_batches=6, chunks=2)], ids=str)
def test_the_step_plan_beats_an_independent_search(rng, pipeline):
    frame = table(rng, counts=(14,))
    limit = loose_limit(frame, **pipeline) * 0.85
    sapp = sappkit.balance(frame, memory_mb=limit, **pipeline)
    step = sappkit.balance(frame, memory_mb=limit, objective="step", **pipeline)
    reference = independent_search(sapp.setup, sapp.counts, rng)
    assert step.step_time <= reference * 1.005
    assert step.step_time <= sapp.simulate().step_time


def test_the_search_is_deterministic(rng):
    frame = table(rng, counts=(14,))
    pipeline = dict(stages=4, micro_batches=4, memory_mb=loose_limit(frame, stages=4, micro_batches=4) * 0.85)
    first = sappkit.balance(frame, objective="step", **pipeline)
    second = sappkit.balance(frame, objective="step", **pipeline)
    assert np.array_equal(first.counts, second.counts) and first.method == second.method


def test_valid_agrees_with_the_rules_written_out(rng):
    frame = table(rng, kinds=2, counts=(2, 3), options=("none", "full"), modules=["vision", "language"])
    for pipeline in (dict(stages=2, micro_batches=3), dict(stages=2, micro_batches=4, chunks=2,
                                                           schedule="dualpipev")):
        setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline), **pipeline)
        every = np.array(list(every_placement(setup)))
        expected = [allowed(setup, counts) for counts in every]
        assert valid(setup, every).tolist() == expected
        assert 0 < sum(expected) < len(expected)


@pytest.mark.parametrize("pipeline", [dict(stages=4, micro_batches=8, chunks=2), dict(stages=3, micro_batches=3),
                                      dict(stages=2, micro_batches=4, chunks=2, schedule="dualpipev")], ids=str)
def test_the_changes_validity_prices_only_the_stages_they_touch_and_agrees(rng, pipeline):
    frame = table(rng, kinds=2, counts=(8, 9), options=("none", "full"), modules=["vision", "language"])
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline) * 0.9, **pipeline)
    start = sappkit.balance(frame, memory_mb=setup.memory_mb, **pipeline).counts
    changes = candidate_changes(setup, start, rng.uniform(-1, 0, size=(len(setup.items), setup.chunks * setup.stages)))
    expected = [allowed(setup, counts) for counts in applied(start, changes)]
    assert valid_changes(KnownMemory(setup), start, changes).tolist() == expected
    assert 0 < sum(expected) < len(expected)


def test_improve_starts_and_kicks(rng):
    frame = table(rng, counts=(14,))
    pipeline = dict(stages=4, micro_batches=4, memory_mb=loose_limit(frame, stages=4, micro_batches=4) * 0.85)
    sapp = sappkit.balance(frame, **pipeline)
    setup = make_setup(frame, objective="step", **pipeline)
    timer = step_timer(setup)
    found = improve(setup, timer, {"first": sapp.counts, "again": sapp.counts.copy()}, budget=300)
    assert found.start == "first" and found.evaluated <= 300 + 1
    assert found.step_time == pytest.approx(simulated(setup, found.counts), rel=1e-9)
    assert valid(setup, found.counts[None])[0]
    kicked = _kick(KnownMemory(setup), found.counts, np.random.default_rng(1))
    assert valid(setup, kicked[None])[0] and np.abs(kicked - found.counts).sum() <= 8


def test_the_kicks_stop_when_eight_in_a_row_find_nothing_whatever_the_budget_left(rng, monkeypatch):
    from sappkit.balancer.step import local_search

    frame = table(rng, counts=(14,))
    pipeline = dict(stages=4, micro_batches=8, chunks=2)
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline) * 0.85, objective="step", **pipeline)
    start = sappkit.balance(frame, memory_mb=setup.memory_mb, **pipeline).counts
    helped = []  # per kick of the one start, whether its descent beat the best
    beats = local_search._Reached.beats
    monkeypatch.setattr(local_search._Reached, "beats", lambda self, other: helped.append(beats(self, other))
                        or helped[-1])
    found = improve(setup, step_timer(setup), {"sapp": start}, budget=10**7)
    assert local_search._PATIENCE == 8 and found.evaluated < 10**6 and sum(helped) == found.kicks >= 1
    runs = "".join("x" if kick else "." for kick in helped).split("x")
    assert runs[-1] == "." * 8 and all(len(run) < 8 for run in runs[:-1])


def test_a_descent_stops_at_a_known_local_optimum_and_reaches_what_it_would_have(rng):
    frame = table(rng, counts=(14,))
    pipeline = dict(stages=4, micro_batches=8, chunks=2)
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline) * 0.85, objective="step", **pipeline)
    timer, memory = step_timer(setup), KnownMemory(setup)
    start = sappkit.balance(frame, memory_mb=setup.memory_mb, **pipeline).counts
    optima = set()
    first = _descend(memory, timer, start, 10_000, optima)
    assert optima == {first.counts.tobytes()} and first.evaluated > 0
    # from the optimum itself: nothing tried again, unless it is not known
    assert _descend(memory, timer, first.counts, 10_000, optima).evaluated == 0
    again = _descend(memory, timer, first.counts, 10_000, set())
    assert again.evaluated > 0 and np.array_equal(again.counts, first.counts) and again.changes.total == 0
    # from the start again: the same placement, no more placements simulated
    known = _descend(memory, timer, start, 10_000, optima)
    assert np.array_equal(known.counts, first.counts) and known.time == first.time
    assert known.evaluated < first.evaluated
    # a descent cut short by its budget knows no optimum
    short = set()
    assert _descend(memory, timer, start, 5, short).evaluated <= 5 and not short


def test_the_plan_says_which_start_and_changes_reached_it(rng):
    frame = table(rng, counts=(14,))
    pipeline = dict(stages=3, micro_batches=6, chunks=2)
    limit = loose_limit(frame, **pipeline) * 0.85
    plan = sappkit.balance(frame, memory_mb=limit, objective="step", **pipeline)
    setup, timer = plan.setup, step_timer(plan.setup)
    sapp = sappkit.balance(frame, memory_mb=limit, **pipeline)
    found = improve(setup, timer, {"sapp optimum (exact search)": sapp.counts})
    if found.changes.total:
        assert found.describe().startswith(f"sapp optimum (exact search), then {found.changes.describe()} by local "
                                           "search")
    text = " ".join(plan.describe().split())  # describe() wraps at 100 columns
    assert "(simulated step time; proven lower bound" in text and f"gap {plan.gap:.1%}) found by: {plan.method}" in text
    assert Changes(moves=12, swaps=3, exchanges=1).describe() == "12 moves, 3 swaps and 1 stage exchange"
    assert Changes(moves=1, resplits=2).describe() == "1 move and 2 stage re-splits"
    assert Changes().total == 0


def test_kicks_keep_every_kinds_layers():
    """A swap whose two items or two cells coincide repeats an index; the kick must still move, not add, layers
    (the vision-language model with one option per kind once gained two vision layers)."""
    rows = [dict(kind=kind, role="body", count=6, param_mb=1, option="full", forward_time=1.0, backward_time=2.0,
                 activation_mb=1.0) for kind in ("vision", "language")]
    setup = make_setup(pd.DataFrame(rows), stages=3, micro_batches=6, memory_mb=1e6, objective="step")
    counts = sappkit.balance(pd.DataFrame(rows), stages=3, micro_batches=6, memory_mb=1e6).counts
    rng, memory = np.random.default_rng(0), KnownMemory(setup)
    for _ in range(200):
        kicked = _kick(memory, counts, rng)
        if kicked is not None:
            assert kicked.sum(axis=(1, 2)).tolist() == [6, 6]
