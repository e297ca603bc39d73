"""A proven lower bound on the simulated step time of every placement that fits.

Each stage path of :func:`sappkit.pipeline.critical.stage_paths` bounds the
step time of a placement from below, and its length is linear in the
placement. So

.. math::

   \\min_x \\; T \\quad \\text{s.t.} \\quad T \\ge \\ell_P(x) \\;\\; \\text{for every stage path } P,
   \\qquad x \\text{ in the balancer's constraints (memory, cells, frontier, ...)}

bounds the best step time from below, and so does its linear relaxation
(every integer of :class:`~sappkit.balancer.ilp.program.BalanceModel` made
continuous), which HiGHS solves in milliseconds. The relaxation lets layers
and recompute split into fractions, so the bound is loose where a stage
holds few layers (a few per cent to ~15 % on the bundled models); it is a
certificate, not a target.
"""

from __future__ import annotations

import numpy as np
import pulp

from ..ilp.program import BalanceModel
from ..setup import BalanceSetup
from ..ilp.solver import SolverOptions, solve
from .steptime import StepTimer

__all__ = ["step_lower_bound"]


def step_lower_bound(setup: BalanceSetup, timer: StepTimer, options: SolverOptions) -> float | None:
    """The bound of the module docstring (None when the relaxation is not solved)."""
    model = BalanceModel(setup)
    problem = model.problem
    for variable in problem.variables():
        variable.cat = pulp.LpContinuous
    paths = timer.graph.paths
    weights = timer.cell_weights(paths)  # [path, item, chunk p + stage]
    fixed = paths @ timer.durations(np.zeros((len(setup.items), setup.chunks, setup.stages)))
    bound = problem.add_variable("step_bound", 0, None)
    for index, (weight, constant) in enumerate(zip(weights, fixed)):
        length = pulp.lpSum(float(weight[i, c * setup.stages + s]) * x for (i, c, s), x in model.x.items()
                            if weight[i, c * setup.stages + s])
        problem.addConstraint(bound >= length + float(constant), name=f"path_{index}")
    problem.setObjective(bound + 0)
    result = solve(problem, options)
    if result.status == "optimal":
        return float(result.objective)
    return None if result.bound is None else float(result.bound)
