"""The step objective's lower bound: below brute force, the stage-path relaxation at its first round (written
again in PuLP here), and tighter with its added paths."""

from __future__ import annotations

import numpy as np
import pulp
import pytest

import sappkit
from sappkit.balancer.ilp.program import BalanceModel
from sappkit.balancer.ilp.solver import SolverOptions, solve
from sappkit.balancer.setup import make_setup
from sappkit.balancer.step import bound
from sappkit.balancer.step.steptime import step_timer
from sappkit.bench.step_cases import STRESS_FAMILIES, stress_instance

from ..test_optimise import loose_limit, table
from .test_local_search import TINY, allowed, every_placement, simulated


def stage_path_relaxation(setup, timer) -> float:
    """The relaxation over the stage paths alone, built in PuLP from the model's variables (no HiGHS rows)."""
    model = BalanceModel(setup)
    for variable in model.problem.variables():
        variable.cat = pulp.LpContinuous
    step = model.problem.add_variable("step", 0, None)
    zero = timer.durations(np.zeros((len(setup.items), setup.chunks, setup.stages)))
    for path in timer.graph.paths:
        weight = timer.cell_weights(path)[0]
        model.problem.addConstraint(step >= pulp.lpSum(float(weight[i, c * setup.stages + s]) * x
                                                       for (i, c, s), x in model.x.items())
                                    + float(path @ zero))
    model.problem.setObjective(step + 0)
    result = solve(model.problem, SolverOptions())
    assert result.status == "optimal"
    return float(result.objective)


@pytest.mark.parametrize("pipeline, counts, scale", TINY, ids=lambda x: str(x))
def test_the_bound_lies_below_every_placement_and_its_first_round_is_the_stage_path_relaxation(
        rng, monkeypatch, pipeline, counts, scale):
    frame = table(rng, kinds=len(counts), counts=counts, options=("none", "full"), modules=["m"] * len(counts))
    limit = loose_limit(frame, **pipeline) * scale
    setup = make_setup(frame, memory_mb=limit, objective="step", working_set=False, **pipeline)
    times = {simulated(setup, counts): counts for counts in every_placement(setup) if allowed(setup, counts)}
    if not times:
        return
    best = min(times)
    timer = step_timer(setup)
    full = bound.step_lower_bound(setup, timer, times[best])
    alone = bound.step_lower_bound(setup, timer)
    assert full <= best * (1 + 1e-9) and alone <= best * (1 + 1e-9)
    monkeypatch.setattr(bound, "ROUNDS", 1)
    first = bound.step_lower_bound(setup, timer)
    assert first == pytest.approx(stage_path_relaxation(setup, timer), rel=1e-7, abs=1e-7)
    assert alone >= first * (1 - 1e-9)


def test_added_paths_close_most_of_the_stage_paths_gap_on_a_stress_case(monkeypatch):
    """The first stress family's first case (p 16, m 64, v 2): the stage paths leave the relaxation more than
    10 % under the step plan (14.1 %); the added paths close more than 40 % of that gap (to 7.6 %), never
    passing the plan."""
    table_, pipeline = stress_instance(np.random.default_rng(37), STRESS_FAMILIES[0])
    plan = sappkit.balance(table_, objective="step", **pipeline)
    setup = make_setup(table_, objective="step", **pipeline)
    timer = step_timer(setup)
    tightened = bound.step_lower_bound(setup, timer, plan.counts)
    assert plan.lower_bound == pytest.approx(tightened, rel=1e-9)
    monkeypatch.setattr(bound, "ROUNDS", 1)
    stage_paths = bound.step_lower_bound(setup, timer, plan.counts)
    assert 1 - stage_paths / plan.step_time > 0.10
    assert (1 - tightened / plan.step_time) < (1 - stage_paths / plan.step_time) * 0.6
    assert tightened <= plan.step_time


def test_without_a_solved_relaxation_there_is_no_bound(rng, monkeypatch):
    frame = table(rng, counts=(6,), options=("none", "full"))
    setup = make_setup(frame, memory_mb=1e9, objective="step", stages=2, micro_batches=4, chunks=2)
    monkeypatch.setattr(bound._PathProgram, "solve", lambda self: None)
    assert bound.step_lower_bound(setup, step_timer(setup)) is None
