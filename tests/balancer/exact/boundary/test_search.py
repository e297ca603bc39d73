"""The exact search for two body kinds over several chunks: the optimum of brute force and of the ILP.

The search carries the cell where the first kind ends through a DP over
stages; these tests check its optimum against SAPP's pipeline balancer's objective over
every placement (the reference brute force of ``test_optimise``, written
out cell by cell), against every placement in model order as
:func:`~sappkit.balancer.evaluate.evaluate` judges it (with the working
set, and on a V-shaped schedule), and against the integer program.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from sappkit import balance
from sappkit.balancer.exact.boundary import search as boundary, split_search, stage_dp
from sappkit.balancer.exact.cells import Cache
from sappkit.balancer.exact import why_not_applicable, search
from sappkit.balancer.evaluate import evaluate, split_terms
from sappkit.balancer.setup import make_setup

from ..test_enumeration import brute_force as best_fitting, fills_every_cell, judged, with_working_sets
from ...test_optimise import brute_force, loose_limit, placements, solve_both_ways, table


def follows_model_order(setup, counts) -> bool:
    """No first-kind layer on a cell once the second kind has started on a cell before it (SAPP's
    frontier: :meth:`~sappkit.balancer.setup.BalanceSetup.earlier_cells`); any placement of one kind."""
    if len(setup.kinds) == 1:
        return True
    first, second = (counts[setup.item_indices(kind)].sum(axis=0) for kind in setup.kinds)
    return not any(first[c, s] > 0 and any(second[d, t] > 0 for d, t in setup.earlier_cells(c, s))
                   for c, s in setup.cells)


def model_order_placements(setup):
    """Every placement whose kinds follow the model order."""
    per_kind = []
    for k, kind in enumerate(setup.kinds):
        shape = (len(setup.item_indices(kind)), setup.chunks, setup.stages)
        per_kind.append(placements(int(setup.counts[k]), int(np.prod(shape))).reshape(-1, *shape))
    placed = (np.concatenate(parts) for parts in itertools.product(*per_kind))
    return (counts for counts in placed if follows_model_order(setup, counts))


def in_model_order(setup):
    """(largest stage memory, ``sapp`` objective) of every placement whose kinds follow the model order."""
    return judged(setup, model_order_placements(setup))


def solved(setup):
    """The search's proven optimum (inf when nothing fits); its placement follows the model order."""
    found = search(setup)
    assert found is not None and found.proven
    if found.counts is None:
        return math.inf
    assert follows_model_order(setup, found.counts)
    return found.upper


@pytest.mark.parametrize("counts, pipeline", [
    ((2, 3), dict(stages=2, chunks=2, micro_batches=4)), ((2, 3), dict(stages=2, chunks=2, micro_batches=3)),
    # every placement of the larger instances takes seconds: the slow lane
    *(pytest.param(counts, pipeline, marks=pytest.mark.slow) for counts, pipeline in [
        ((2, 4), dict(stages=2, chunks=3, micro_batches=4)), ((1, 5), dict(stages=3, chunks=2, micro_batches=6)),
        ((4, 2), dict(stages=3, chunks=2, micro_batches=4)), ((2, 3), dict(stages=2, chunks=2, micro_batches=2)),
        ((2, 4), dict(stages=2, chunks=3, micro_batches=2)), ((4, 2), dict(stages=3, chunks=2, micro_batches=3))])],
    ids=["v2 m2p", "v2 m not a multiple of p", "v3", "boundary on chunk 0", "on chunk 1", "split v2", "split v3",
         "split p3"])
def test_the_search_equals_sapps_objective_over_every_placement(counts, pipeline):
    rng = np.random.default_rng(11)
    for trial in range(3):
        frame = table(rng, kinds=2, counts=counts, options=("none", "full"), tail=bool(trial % 2))
        limit = loose_limit(frame, **pipeline)
        for scale in (0.8, 1.0, 1.3):
            setup = make_setup(frame, memory_mb=limit * scale, working_set=False, consistent_recompute=False,
                               **pipeline)
            assert why_not_applicable(setup) == ""
            expected = brute_force(frame, memory_mb=setup.memory_mb, consistency=False, **pipeline)
            assert solved(setup) == pytest.approx(math.inf if expected is None else expected, rel=1e-9)


@pytest.mark.parametrize("schedule, options, counts, stages", [
    ("interleaved", ("none", "selective", "full"), (2, 2), 2), ("interleaved", ("none", "full"), (1, 3), 3),
    ("zbv", ("none", "full"), (2, 2), 2), ("zbv", ("none", "full"), (3, 1), 3),
    ("zbv", ("none", "full"), (5, 1), 2)])
def test_the_search_equals_every_placement_in_model_order_with_the_working_set(schedule, options, counts, stages):
    rng = np.random.default_rng(5)
    pipeline = dict(stages=stages, chunks=2, micro_batches=2 * stages, schedule=schedule)
    for trial in range(2):
        frame = with_working_sets(rng, table(rng, kinds=2, counts=counts, options=options, tail=bool(trial)))
        limit = loose_limit(frame, **pipeline)
        setup = make_setup(frame, memory_mb=limit, working_set=True, consistent_recompute=False, **pipeline)
        placed = in_model_order(setup)
        for scale in (0.75, 1.0, 1.5):
            setup = make_setup(frame, memory_mb=limit * scale, working_set=True, consistent_recompute=False,
                               **pipeline)
            assert solved(setup) == pytest.approx(best_fitting(placed, setup.memory_mb), rel=1e-9)


@pytest.mark.parametrize("schedule, counts, stages, chunks", [
    ("interleaved", (2, 2), 2, 2), ("interleaved", (1, 3), 3, 2),
    pytest.param("interleaved", (2, 3), 2, 3, marks=pytest.mark.slow), ("interleaved", (5, 0), 2, 2),
    pytest.param("interleaved", (6, 0), 2, 3, marks=pytest.mark.slow)],
    ids=["v2", "p3", "v3", "one kind v2", "one kind v3"])
def test_the_split_objective_of_m_equal_p_equals_every_placement_with_the_working_set(schedule, counts, stages,
                                                                                      chunks):
    # m = p: S + max(L, S), a bound on S tried per candidate; one kind is the search's n1 = 0.
    rng = np.random.default_rng(8)
    pipeline = dict(stages=stages, chunks=chunks, micro_batches=stages, schedule=schedule)
    kinds = 1 if counts[1] == 0 else 2
    for trial in range(2):
        frame = with_working_sets(rng, table(rng, kinds=kinds, counts=counts[:kinds], options=("none", "full"),
                                             tail=bool(trial)))
        limit = loose_limit(frame, **pipeline)
        setup = make_setup(frame, memory_mb=limit, working_set=True, consistent_recompute=False, **pipeline)
        assert setup.bottleneck_split and boundary.why_not_applicable(setup) == ""
        placed = in_model_order(setup)
        for scale in (0.75, 1.0, 1.5):
            setup = make_setup(frame, memory_mb=limit * scale, working_set=True, consistent_recompute=False,
                               **pipeline)
            assert solved(setup) == pytest.approx(best_fitting(placed, setup.memory_mb), rel=1e-9)


def split_parts(setup, counts):
    """``(S, L)`` of ``counts`` under the split objective, or None where it leaves a cell empty that must hold
    a layer or does not fit the memory limit."""
    if not fills_every_cell(setup, counts):
        return None
    result = evaluate(setup, counts)
    if result.stages["memory_mb"].max() > setup.memory_mb * (1 + 1e-9) + 1e-6:
        return None
    return split_terms(setup, result.backward, result.forward - setup.fixed_forward)


def test_the_unpriced_optimum_bounds_the_stage_time_and_is_it_without_a_memory_limit(rng):
    # The stage time's cap starts at the DP's optimum with every content at its least stage time.
    frame = with_working_sets(rng, table(rng, kinds=2, counts=(4, 11), options=("none", "selective", "full")))
    pipeline = dict(stages=3, chunks=2, micro_batches=6, working_set=True, consistent_recompute=False)
    limit = loose_limit(frame, **pipeline)
    for memory_mb in (0.8 * limit, limit, 1e9):
        setup = make_setup(frame, memory_mb=memory_mb, **pipeline)
        optimum = solved(setup)
        unpriced, _, placed = stage_dp.optimum(setup, Cache().bind(setup), 1e9, "time", priced=False)
        assert placed is None
        assert unpriced <= optimum * (1 + 1e-9)
        if memory_mb == 1e9:
            assert unpriced == pytest.approx(optimum, rel=1e-9)


@pytest.mark.parametrize("counts, chunks", [((2, 2), 2), ((2, 3), 3), ((5, 0), 2)], ids=["v2", "v3", "one kind"])
def test_the_least_l_with_s_bounded_equals_every_placement(counts, chunks):
    # The split objective's branch and bound rests on one DP: the least L with S within sigma.
    rng = np.random.default_rng(4)
    pipeline = dict(stages=2, chunks=chunks, micro_batches=2, schedule="interleaved")
    kinds = 1 if counts[1] == 0 else 2
    frame = with_working_sets(rng, table(rng, kinds=kinds, counts=counts[:kinds], options=("none", "full")))
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline), working_set=True, consistent_recompute=False,
                       **pipeline)
    parts = np.array([part for counts in model_order_placements(setup)
                      if (part := split_parts(setup, counts)) is not None])
    assert len(parts)
    cache, everything = Cache().bind(setup), 1e9
    for sigma in np.unique(parts[:, 0]):
        _, least, counts = stage_dp.optimum(setup, cache, everything, "split", float(sigma))
        assert least == pytest.approx(parts[parts[:, 0] <= sigma * (1 + 1e-12), 1].min(), rel=1e-9)
        placed = split_parts(setup, counts)
        assert placed is not None and placed[0] <= sigma * (1 + 1e-9) and placed[1] <= least * (1 + 1e-9)


@pytest.mark.parametrize("budget", [1, 2])
def test_one_kind_past_the_split_budget_is_proven_by_the_enumeration(rng, monkeypatch, budget):
    frame = with_working_sets(rng, table(rng, kinds=1, counts=(12,), options=("none", "selective", "full")))
    pipeline = dict(stages=3, chunks=2, micro_batches=3, working_set=True, consistent_recompute=False)
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline), **pipeline)
    optimum = search(setup)
    assert optimum.proven and optimum.counts is not None
    monkeypatch.setattr(split_search, "_SPLIT_BUDGET", budget)
    cut = boundary.search(setup, Cache().bind(setup))
    assert cut is None or not cut[0]  # nothing, or a placement unproven
    enumerated = search(setup)
    assert enumerated.proven and enumerated.upper == pytest.approx(optimum.upper, rel=1e-9)


@pytest.mark.slow  # the ILP on 24-layer instances; tests/balancer/exact keeps quicker ILP agreements
@pytest.mark.parametrize("working", [False, True], ids=["no working set", "working set"])
def test_the_search_agrees_with_the_ilp(rng, working):
    for chunks, micro_batches in ((2, 8), (3, 6), (2, 3), (3, 3)):
        frame = table(rng, kinds=2, counts=(4, 11), options=("none", "selective", "full"))
        frame = with_working_sets(rng, frame) if working else frame
        pipeline = dict(stages=3, chunks=chunks, micro_batches=micro_batches, working_set=working,
                        consistent_recompute=False)
        limit = loose_limit(frame, **pipeline)
        for scale in (0.7, 1.0):
            fast, ilp, status = solve_both_ways(frame, memory_mb=limit * scale, **pipeline)
            assert status in ("optimal", "infeasible")
            assert fast is not None and fast == pytest.approx(ilp, rel=1e-6)


@pytest.mark.parametrize("budget", [1, 3])
def test_the_split_search_past_its_budget_hands_its_best_placement_to_the_integer_program(rng, monkeypatch, budget):
    frame = with_working_sets(rng, table(rng, kinds=2, counts=(4, 11), options=("none", "selective", "full")))
    pipeline = dict(stages=3, chunks=2, micro_batches=3, working_set=True, consistent_recompute=False)
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline), **pipeline)
    optimum = search(setup)
    assert optimum.proven and optimum.counts is not None
    monkeypatch.setattr(split_search, "_SPLIT_BUDGET", budget)
    cut = search(setup)
    if cut is not None:  # the best placement found, a real one, and a lower bound the optimum respects
        assert not cut.proven and cut.counts is not None and cut.upper >= optimum.upper * (1 - 1e-9)
        assert cut.lower <= optimum.upper * (1 + 1e-9)
    plan = balance(frame, memory_mb=setup.memory_mb, **pipeline)
    assert plan.status == "optimal" and "ilp" in plan.method
    assert plan.objective == pytest.approx(optimum.upper, rel=1e-6)


@pytest.mark.parametrize("micro_batches", [6, 3], ids=["stage time", "split"])
def test_one_cache_serves_every_memory_limit(rng, micro_batches):
    # sweep_memory and the dashboard keep one cache per pipeline across limits
    frame = with_working_sets(rng, table(rng, kinds=2, counts=(4, 11), options=("none", "selective", "full")))
    pipeline = dict(stages=3, chunks=2, micro_batches=micro_batches, working_set=True, consistent_recompute=False)
    limit = loose_limit(frame, **pipeline)
    shared = Cache()
    for scale in (1.3, 0.8, 1.0, 0.7):
        setup = make_setup(frame, memory_mb=limit * scale, **pipeline)
        alone, reused = search(setup), search(setup, cache=shared)
        assert alone.proven and reused.proven and (alone.counts is None) == (reused.counts is None)
        assert alone.counts is None or reused.upper == pytest.approx(alone.upper, rel=1e-9)


def test_least_memory_is_the_least_over_every_placement_and_infeasible_limits_are_proven(rng):
    frame = with_working_sets(rng, table(rng, kinds=2, counts=(2, 2), options=("none", "selective", "full")))
    pipeline = dict(stages=2, chunks=2, micro_batches=4, working_set=True, consistent_recompute=False)
    setup = make_setup(frame, memory_mb=1.0, **pipeline)
    peaks, _ = in_model_order(setup)
    least = boundary.least_memory(setup, Cache().bind(setup))
    plan = balance(frame, memory_mb=1.0, **pipeline)
    assert plan.status == "infeasible" and plan.memory_needed_mb == pytest.approx(peaks.min(), abs=1e-6)
    assert least is not None and follows_model_order(setup, least) and solved(setup) == math.inf
    assert balance(frame, memory_mb=float(peaks.min()), **pipeline).status == "optimal"


def test_what_the_search_leaves_to_the_integer_program(rng):
    frame = table(rng, kinds=3, counts=(2, 2, 2), options=("none", "full"))
    assert "more than two body kinds" in why_not_applicable(make_setup(frame, stages=2, chunks=2, micro_batches=4,
                                                               memory_mb=1e9, consistent_recompute=False))
    two = table(rng, kinds=2, counts=(3, 3), options=("none", "full"))
    assert "consistency" in why_not_applicable(make_setup(two, stages=2, chunks=2, micro_batches=4, memory_mb=1e9,
                                                  consistent_recompute=True))
