"""The step search's starts: the fastest even plan that fits, and the least busiest-stage work against brute force."""

from __future__ import annotations

import numpy as np
import pytest

import sappkit
from sappkit.balancer.exact import Cache
from sappkit.balancer.setup import make_setup
from sappkit.balancer.step.least_work import least_work
from sappkit.balancer.step.starts import start_placements
from sappkit.balancer.step.steptime import step_timer
from sappkit.balancer.views import even_plan

from ..test_optimise import OPTIONS, loose_limit, table
from .test_local_search import allowed, every_placement


def stage_works(setup, counts) -> np.ndarray:
    """Each stage's Σ_c (F + B), head and tail included."""
    cells = (np.tensordot(setup.forward + setup.backward, counts, axes=(0, 0)) + setup.fixed_forward
             + setup.fixed_backward)
    return cells.sum(axis=0)


def busiest_work(setup, counts) -> float:
    """The largest Σ_c (F + B) of a stage."""
    return float(stage_works(setup, counts).max())


@pytest.mark.parametrize("pipeline, layers", [(dict(stages=2, micro_batches=4, chunks=2), 5),
                                              (dict(stages=2, micro_batches=4, chunks=2, schedule="dualpipev"), 5),
                                              (dict(stages=3, micro_batches=6, chunks=2), 7)], ids=str)
def test_least_work_is_the_least_busiest_stage_over_every_placement(rng, pipeline, layers):
    frame = table(rng, counts=(layers,), options=("none", "full"))
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline) * 0.8, objective="step",
                       working_set=False, **pipeline)
    works = [stage_works(setup, counts) for counts in every_placement(setup) if allowed(setup, counts)]
    least = min(w.max() for w in works)
    found = least_work(setup, Cache(), cap=max(w.max() for w in works))
    assert allowed(setup, found)
    assert busiest_work(setup, found) == pytest.approx(least, rel=1e-9)
    # of those, the least total work (the least recompute every stage's memory allows)
    assert stage_works(setup, found).sum() == pytest.approx(min(w.sum() for w in works if w.max() <= least * (1 + 1e-9)),
                                                            rel=1e-9)
    assert least_work(setup, Cache(), cap=least * 0.99) is None


def test_the_starts_are_the_sapp_optimum_the_fastest_even_plan_that_fits_and_the_least_work(rng):
    frame = table(rng, counts=(12,))
    pipeline = dict(stages=2, micro_batches=8, chunks=2)
    limit = loose_limit(frame, **pipeline) * 0.9
    setup = make_setup(frame, memory_mb=limit, objective="step", **pipeline)
    timer = step_timer(setup)
    sapp = sappkit.balance(frame, memory_mb=limit, **pipeline)
    starts = start_placements(setup, timer, sapp.counts, "sapp optimum", Cache())
    assert list(starts)[0] == "sapp optimum" and np.array_equal(starts["sapp optimum"], sapp.counts)
    even = {option: even_plan(frame, option=option, memory_mb=limit, **pipeline) for option in OPTIONS}
    fitting = {option: plan.simulate().step_time for option, plan in even.items() if plan.fits}
    fastest = min(fitting, key=fitting.get)
    assert np.array_equal(starts[f"even plan ({fastest})"], even[fastest].counts)
    assert len([label for label in starts if label.startswith("even plan")]) == 1
    assert "least busiest-stage work" in starts
    for counts in starts.values():
        assert allowed(setup, counts)


@pytest.mark.parametrize("budget", [1, 2])
def test_an_unproven_sapp_start_is_the_exact_search_placement_without_its_proof(rng, monkeypatch, budget):
    from sappkit.balancer import optimise as module
    from sappkit.balancer.ilp.solver import SolverOptions

    frame = table(rng, counts=(40,))
    pipeline = dict(stages=4, micro_batches=4, chunks=2)
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline), **pipeline)
    proven = module.optimise(setup, SolverOptions())
    monkeypatch.setattr(module, "START_SPLIT_BUDGET", budget)
    start = module.optimise(setup, SolverOptions(), prove=False)
    assert proven.status == "optimal" and start.status == "feasible"
    assert start.method == f"exact search, not proven: gap {start.gap:.1%}"
    assert start.objective >= proven.objective * (1 - 1e-9) and start.bound <= proven.objective * (1 + 1e-9)
    assert start.gap == pytest.approx((start.objective - start.bound) / start.objective)
    assert module.evaluate(setup, start.counts).fits
    assert sappkit.balance(frame, memory_mb=setup.memory_mb, **pipeline).objective == pytest.approx(proven.objective)
