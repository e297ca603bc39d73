"""Solver statuses: proven optimal, stopped at a limit with an incumbent and gap, infeasible, failed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pulp
import pytest

import sappkit
from sappkit.balancer.ilp.solver import SolverOptions, _cbc_bound, _cbc_outcome, solve


def knapsack(n=40, seed=3):
    """A partition problem branch-and-bound cannot close at its root."""
    rng = np.random.default_rng(seed)
    weights = rng.integers(1_000, 100_000, n)
    problem = pulp.LpProblem("partition", pulp.LpMinimize)
    x = [problem.add_variable(f"x{i}", cat="Binary") for i in range(n)]
    t = problem.add_variable("t", 0)
    problem += t
    half = weights.sum() / 2
    problem += t >= pulp.lpSum(int(w) * xi for w, xi in zip(weights, x)) - half + 0.5
    problem += t >= half - pulp.lpSum(int(w) * xi for w, xi in zip(weights, x)) + 0.5
    return problem


def small_model():
    problem = pulp.LpProblem("small", pulp.LpMinimize)
    x = problem.add_variable("x", 0, 10, cat="Integer")
    y = problem.add_variable("y", 0, 10, cat="Integer")
    problem += 3 * x + 2 * y + 1
    problem += x + y >= 3.5
    return problem


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_optimal_with_objective_constant(solver):
    result = solve(small_model(), SolverOptions(solver=solver))
    assert (result.status, result.objective, result.gap) == ("optimal", 9.0, 0.0)
    assert result.bound == pytest.approx(9.0)


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_infeasible(solver):
    problem = small_model()
    problem += problem.variablesDict()["x"] + problem.variablesDict()["y"] <= 2
    result = solve(problem, SolverOptions(solver=solver))
    assert result.status == "infeasible" and result.objective is None and not result.has_solution


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_node_limit_returns_incumbent_and_gap(solver):
    result = solve(knapsack(), SolverOptions(solver=solver, node_limit=1))
    assert result.status == "time_limit" and result.has_solution
    assert 0 < result.gap < 1 and result.bound < result.objective


def test_cbc_log_parsing():
    assert _cbc_bound("Result - Stopped on time\n\nObjective value: 12\nLower bound:  10.5\nGap: 0.1\n") == 10.5
    assert _cbc_bound("no report") is None
    problem = small_model()
    problem.sol_status, problem.status = pulp.LpSolutionNoSolutionFound, pulp.LpStatusNotSolved
    assert _cbc_outcome(problem, "Result - Stopped on time limit\n") == dict(
        status="failed", objective=None, bound=None, gap=None,
        message="CBC stopped at a limit before finding a solution")


def test_options_are_checked():
    with pytest.raises(sappkit.InputError) as error:
        SolverOptions(solver="gurobi")
    assert str(error.value) == "solver must be one of 'highs', 'cbc'; got 'gurobi'"
    with pytest.raises(sappkit.InputError) as error:
        SolverOptions(time_limit=0)
    assert str(error.value) == "time_limit must be a finite number > 0; got 0"
    with pytest.raises(sappkit.InputError) as error:
        SolverOptions(threads=0)
    assert str(error.value) == "threads must be an int >= 1; got 0"


def test_solving_prints_nothing_and_warns_nothing():
    code = ("from sappkit.balancer.ilp.solver import solve, SolverOptions\n"
            "import pulp\n"
            "for name in ('highs', 'cbc'):\n"
            "    p = pulp.LpProblem('q', pulp.LpMinimize)\n"
            "    x = p.add_variable('x', 0, 5, cat='Integer')\n"
            "    p += x\n"
            "    p += x >= 1.5\n"
            "    assert solve(p, SolverOptions(solver=name)).status == 'optimal'\n")
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code],
                          capture_output=True, text=True, check=True)
    assert (done.stdout, done.stderr) == ("", "")


def test_balance_with_cbc_matches_highs():
    frame = pd.DataFrame([
        *[dict(kind="dense", role="body", count=2, param_mb=10, option=o, forward_time=2, backward_time=bt,
               activation_mb=a) for o, bt, a in (("none", 4, 29), ("full", 9, 2))],
        *[dict(kind="moe", role="body", count=4, param_mb=30, option=o, forward_time=3, backward_time=bt,
               activation_mb=a) for o, bt, a in (("none", 6, 36), ("full", 12, 5))]])
    highs = sappkit.balance(frame, stages=2, micro_batches=4, memory_mb=150)
    cbc = sappkit.balance(frame, stages=2, micro_batches=4, memory_mb=150, solver=SolverOptions(solver="cbc"))
    assert highs.method == "ilp (highs)" and cbc.method == "ilp (cbc)"
    assert (cbc.status, cbc.objective) == ("optimal", highs.objective)


def test_time_limited_balance_says_so():
    rows = [dict(kind=k, role="body", count=24, param_mb=10, option=o, forward_time=2 + i, backward_time=bt + i,
                 activation_mb=a) for i, k in enumerate(("a", "b"))
            for o, bt, a in (("none", 4, 30), ("selective", 5, 12), ("full", 7, 3))]
    plan = sappkit.balance(pd.DataFrame(rows), stages=6, micro_batches=12, chunks=2, memory_mb=1800,
                           optimization_level=2, solver=SolverOptions(node_limit=1))
    assert plan.status == "time_limit" and plan.gap > 0
    assert plan.message == "HiGHS stopped at its node limit with an incumbent"
    assert plan.fits
