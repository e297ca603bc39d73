"""A proven lower bound on the simulated step time of every placement that fits.

Every path ``P`` through the schedule's graph bounds the step time of every
placement from below, and its length ``ℓ_P(x)`` is linear in the placement.
So for any set of paths

.. math::

   \\min_x \\; T \\quad \\text{s.t.} \\quad T \\ge \\ell_P(x) \\;\\; \\text{for every listed path } P,
   \\qquad x \\text{ in the balancer's constraints (memory, cells, frontier, ...)}

bounds the best step time from below, and so does its linear relaxation
(every integer of :class:`~sappkit.balancer.ilp.program.BalanceModel` made
continuous), which HiGHS solves in milliseconds.

The stage paths of :func:`sappkit.pipeline.critical.stage_paths` alone leave
the bound loose on interleaved pipelines (10-25 % on the step bench's stress
families): the relaxation gathers layers where those few paths are short, and
the step's real longest path runs elsewhere. So the bound adds paths as a
cutting-plane method does: the relaxation's optimum ``x*`` is a placement of
fractional layers, whose durations, linear in it, the simulator times like any
other; its longest path is a path the listed ones miss whenever it is longer
than the relaxation's ``T``. Each round adds the longest path of ``x*`` and of
the point halfway from ``x*`` to the best placement known (an in-out step,
which steadies the cuts), and solves again with HiGHS's warm start. Every
round's ``T`` is a bound; the rounds stop when a probed point is within
:data:`CLOSE` of it (the relaxation over all paths is nearly solved), when it
reaches the best placement's step time (proven optimal) or after
:data:`ROUNDS` rounds. What stays is the relaxation's integrality gap: layers
and recompute in fractions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pulp

from ..ilp.program import BalanceModel
from ..ilp.solver import quiet_highs
from ..setup import BalanceSetup
from .steptime import StepTimer

__all__ = ["step_lower_bound", "ROUNDS", "CLOSE"]

#: Rounds of added paths at most (each a warm-started LP and two longest paths).
ROUNDS = 40
#: The rounds stop when a probed point's step time is within this fraction of the relaxation's value.
CLOSE = 1e-3
#: Relative tolerance at which the bound counts as reaching the best placement's step time.
_REACHED = 1e-9


class _PathProgram:
    """The relaxation of the module docstring in one HiGHS model, paths added row by row."""

    def __init__(self, setup: BalanceSetup, timer: StepTimer):
        import highspy

        self._inf = highspy.kHighsInf
        self.setup, self.timer = setup, timer
        model = BalanceModel(setup)
        problem = model.problem
        variables = problem.variables()
        index = {variable.name: k for k, variable in enumerate(variables)}
        self.cells = np.full((len(setup.items), setup.chunks * setup.stages), -1)
        for (i, c, s), variable in model.x.items():
            self.cells[i, c * setup.stages + s] = index.get(variable.name, -1)
        self.model = quiet_highs()
        lower = [-self._inf if v.lowBound is None else float(v.lowBound) for v in variables]
        upper = [self._inf if v.upBound is None else float(v.upBound) for v in variables]
        self.model.addVars(len(variables) + 1, np.array(lower + [0.0]), np.array(upper + [self._inf]))
        self.bound = len(variables)  # the column of T
        self.model.changeColCost(self.bound, 1.0)
        with warnings.catch_warnings():  # PuLP 3.3 deprecates the mapping its 3.3.1 floor has alone
            warnings.simplefilter("ignore", DeprecationWarning)
            constraints = list(problem.constraints.values())
        for constraint in constraints:
            columns = np.array([index[v.name] for v in constraint], dtype=np.int32)
            values = np.array([float(a) for a in constraint.values()])
            rhs = -float(constraint.constant)
            low = -self._inf if constraint.sense == pulp.LpConstraintLE else rhs
            high = self._inf if constraint.sense == pulp.LpConstraintGE else rhs
            self.model.addRow(low, high, len(columns), columns, values)
        self.fixed = timer.durations(np.zeros((len(setup.items), setup.chunks, setup.stages)))

    def add(self, paths: np.ndarray) -> None:
        """Rows ``T - ℓ_P(x) >= ℓ_P(0)`` for each path (counts per duration)."""
        paths = np.atleast_2d(paths)
        for weight, constant in zip(self.timer.cell_weights(paths), paths @ self.fixed):
            used = (self.cells >= 0) & (weight != 0)
            columns = np.r_[self.cells[used], self.bound].astype(np.int32)
            values = np.r_[-weight[used], 1.0]
            self.model.addRow(float(constant), self._inf, len(columns), columns, values)

    def solve(self) -> tuple[float, np.ndarray] | None:
        """The relaxation's value and its optimum ``x*`` (``[item, chunk, stage]``), or None unsolved."""
        import highspy

        self.model.run()
        if self.model.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
        values = np.asarray(self.model.getSolution().col_value)
        x = np.where(self.cells >= 0, values[np.maximum(self.cells, 0)], 0.0)
        return float(values[self.bound]), x.reshape(len(self.setup.items), self.setup.chunks, self.setup.stages)


def step_lower_bound(setup: BalanceSetup, timer: StepTimer, best: np.ndarray | None = None) -> float | None:
    """The bound of the module docstring (None when the relaxation is not solved), from the stage paths and,
    with ``best`` (the best placement known), its longest path and the in-out rounds towards it."""
    program = _PathProgram(setup, timer)
    program.add(timer.graph.paths)
    best_time = np.inf
    if best is not None:
        best = np.asarray(best, dtype=float)
        best_time = timer.time(best)
        program.add(timer.critical(best))
    lower = None
    for _ in range(ROUNDS):
        solved = program.solve()
        if solved is None:
            break
        value, x = solved
        lower = value if lower is None else max(lower, value)
        if lower >= best_time * (1 - _REACHED):
            break
        points = np.array([x] if best is None else [x, (x + best) / 2])
        _, _, ends = timer.runs(points)  # both timed in one sweep, each path walked on its own ends
        paths = np.array([timer.critical(point, ends[:, k]) for k, point in enumerate(points)])
        lengths = (paths * timer.durations(points)).sum(axis=1)
        if lengths.min() <= value * (1 + CLOSE):
            break
        program.add(paths)
    return lower
