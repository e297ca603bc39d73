"""Solve a PuLP model with HiGHS or CBC and report honestly what came back.

PuLP labels a time-limited incumbent "Optimal" in ``LpProblem.status``; the
truth is in ``sol_status`` (and, for HiGHS, in the model status and the MIP
dual bound). :func:`solve` turns both solvers' answers into one
:class:`SolveResult` whose ``status`` is one of

- ``"optimal"``: proven optimal within ``SolverOptions.gap``;
- ``"time_limit"``: stopped by a limit (``time_limit`` or ``node_limit``)
  holding an incumbent; ``gap`` says how far from proven it may be;
- ``"infeasible"``: proven to have no solution;
- ``"failed"``: anything else (no incumbent within the limit, a solver
  error); ``message`` says which.

Neither solver prints: HiGHS's once-per-process banner is swallowed and
PuLP's deprecation warnings are kept out of the caller's output.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pulp

from ..._check import check_bool, check_choice, check_int, check_number
from ...limits import MAX_THREADS

__all__ = ["SolverOptions", "SolveResult", "Status", "STATUSES", "quiet_highs", "solve"]

Status = Literal["optimal", "time_limit", "infeasible", "failed"]
STATUSES: tuple[str, ...] = ("optimal", "time_limit", "infeasible", "failed")


@dataclass(frozen=True, kw_only=True)
class SolverOptions:
    """How to solve the balancer's integer programs.

    Examples
    --------
    >>> SolverOptions(solver="cbc", time_limit=30).solver
    'cbc'
    """

    solver: Literal["highs", "cbc"] = "highs"
    """``"highs"`` (HiGHS through PuLP's ``highspy`` API) or ``"cbc"`` (PuLP's bundled CBC)."""
    time_limit: float | None = 60.0
    """Seconds before the solver stops with its incumbent (None: no limit)."""
    gap: float = 1e-6
    """Relative gap between incumbent and bound at which a solve counts as proven optimal."""
    threads: int | None = None
    """Solver threads (None: the solver's default)."""
    node_limit: int | None = None
    """Branch-and-bound nodes before the solver stops (None: no limit); a reproducible early stop."""
    msg: bool = False
    """Show the solver's log."""

    def __post_init__(self):
        check_choice("solver", self.solver, ("highs", "cbc"))
        if self.time_limit is not None:
            check_number("time_limit", self.time_limit, minimum=0, strict=True)
        check_number("gap", self.gap, minimum=0)
        if self.threads is not None:
            check_int("threads", self.threads, minimum=1, maximum=MAX_THREADS)
        if self.node_limit is not None:
            check_int("node_limit", self.node_limit, minimum=0)
        check_bool("msg", self.msg)


@dataclass(frozen=True, kw_only=True)
class SolveResult:
    """What one solve returned."""

    status: Status
    """One of :data:`STATUSES`."""
    objective: float | None
    """The incumbent's objective (None without an incumbent)."""
    bound: float | None
    """The best proven lower bound on the objective (None when the solver does not say)."""
    gap: float | None
    """Relative gap ``(objective - bound) / |objective|`` (0 when proven; None when unknown)."""
    seconds: float
    """Wall time of the solve."""
    message: str = ""
    """Why a solve is not optimal, in words."""

    @property
    def has_solution(self) -> bool:
        """True when variable values hold an incumbent."""
        return self.status in ("optimal", "time_limit")


def solve(problem: pulp.LpProblem, options: SolverOptions) -> SolveResult:
    """Solve ``problem`` (a minimisation) in place and report the outcome.

    Variable values are set on ``problem``'s variables when the result
    ``has_solution``. Solver errors become a ``"failed"`` result, never an
    exception.

    Examples
    --------
    >>> problem = pulp.LpProblem("example", pulp.LpMinimize)
    >>> x = problem.add_variable("x", 0, 10, cat="Integer")
    >>> problem += x
    >>> problem += x >= 2.5
    >>> result = solve(problem, SolverOptions())
    >>> result.status, result.objective, x.value()
    ('optimal', 3.0, 3.0)
    """
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            if options.solver == "highs":
                outcome = _solve_highs(problem, options)
            else:
                outcome = _solve_cbc(problem, options)
        except pulp.PulpSolverError as error:
            outcome = dict(status="failed", objective=None, bound=None, gap=None,
                           message=f"{options.solver} failed: {error}")
    return SolveResult(**outcome, seconds=time.perf_counter() - start)


def _gap(objective: float | None, bound: float | None) -> float | None:
    if objective is None or bound is None:
        return None
    return max(0.0, objective - bound) / max(abs(objective), 1e-12)


def _outcome(status: str, problem: pulp.LpProblem, bound: float | None, message: str = "") -> dict:
    if status not in ("optimal", "time_limit"):
        return dict(status=status, objective=None, bound=None, gap=None, message=message)
    objective = pulp.value(problem.objective)
    objective = 0.0 if objective is None else float(objective)
    if status == "optimal":
        bound = objective if bound is None else min(bound, objective)
    return dict(status=status, objective=objective, bound=bound, gap=_gap(objective, bound), message=message)


# ---------------------------------------------------------------- HiGHS


def _quiet_highs_banner() -> None:
    """Create the process's first HiGHS instance with stdout closed: that is when HiGHS prints its banner."""
    import highspy

    try:
        saved = os.dup(1)
    except OSError:
        highspy.Highs()
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


_BANNER_DONE = False


def quiet_highs():
    """A new ``highspy.Highs`` that prints nothing (the process's banner swallowed, its log off)."""
    import highspy

    global _BANNER_DONE
    if not _BANNER_DONE:
        _quiet_highs_banner()
        _BANNER_DONE = True
    model = highspy.Highs()
    model.setOptionValue("output_flag", False)
    return model


class _HiGHS(pulp.HiGHS):
    """PuLP's HiGHS API, mapping every model status (PuLP's table lacks some limits)."""

    def findSolutionValues(self, lp):
        import highspy

        status = lp.solverModel.getModelStatus()
        info = lp.solverModel.getInfo()
        has_solution = info.primal_solution_status == 2
        lp._sappkit_highs = (status, has_solution, info.mip_dual_bound)
        known = (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kInfeasible,
                 highspy.HighsModelStatus.kUnboundedOrInfeasible, highspy.HighsModelStatus.kUnbounded,
                 highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit,
                 highspy.HighsModelStatus.kInterrupt, highspy.HighsModelStatus.kObjectiveBound,
                 highspy.HighsModelStatus.kObjectiveTarget)
        if status in known:
            return super().findSolutionValues(lp)
        if has_solution:
            for var, value in zip(lp.variables(), lp.solverModel.getSolution().col_value):
                var.varValue = value
            return pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible
        return pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound


def _solve_highs(problem: pulp.LpProblem, options: SolverOptions) -> dict:
    import highspy

    global _BANNER_DONE
    if not _BANNER_DONE:
        _quiet_highs_banner()
        _BANNER_DONE = True
    params = {"mip_max_nodes": options.node_limit} if options.node_limit is not None else {}
    solver = _HiGHS(msg=options.msg, timeLimit=options.time_limit, gapRel=options.gap,
                    threads=options.threads, **params)
    problem.solve(solver)
    status, has_solution, dual_bound = problem._sappkit_highs
    # PuLP hands HiGHS the objective without its constant term.
    dual_bound = dual_bound + float(problem.objective.constant) if np.isfinite(dual_bound) else None
    statuses = highspy.HighsModelStatus
    if status == statuses.kOptimal:
        return _outcome("optimal", problem, dual_bound)
    if status in (statuses.kInfeasible, statuses.kUnboundedOrInfeasible):
        return _outcome("infeasible", problem, None, "HiGHS proved the model infeasible")
    if status == statuses.kUnbounded:
        return _outcome("failed", problem, None, "HiGHS found the model unbounded")
    limit = _HIGHS_LIMITS.get(status.name)
    if limit and has_solution:
        return _outcome("time_limit", problem, dual_bound, f"HiGHS stopped at its {limit} with an incumbent")
    if limit:
        return _outcome("failed", problem, None, f"HiGHS stopped at its {limit} before finding a solution")
    return _outcome("failed", problem, None, f"HiGHS ended with model status {status.name}")


#: HiGHS model statuses that mean "stopped by a limit", named for messages.
_HIGHS_LIMITS = {"kTimeLimit": "time limit", "kSolutionLimit": "node limit",
                 "kIterationLimit": "iteration limit", "kInterrupt": "interrupt"}


# ---------------------------------------------------------------- CBC


def _solve_cbc(problem: pulp.LpProblem, options: SolverOptions) -> dict:
    with tempfile.TemporaryDirectory(prefix="sappkit-cbc-") as folder:
        log_path = os.path.join(folder, "cbc.log")
        solver = pulp.COIN_CMD(path=pulp.PULP_CBC_CMD.pulp_cbc_path, msg=False,
                               timeLimit=options.time_limit, gapRel=options.gap,
                               threads=options.threads, maxNodes=options.node_limit,
                               logPath=None if options.msg else log_path)
        solver.tmpDir = folder
        problem.solve(solver)
        log = ""
        if os.path.exists(log_path):
            with open(log_path) as handle:
                log = handle.read()
    return _cbc_outcome(problem, log)


def _cbc_outcome(problem: pulp.LpProblem, log: str) -> dict:
    sol_status = problem.sol_status
    if sol_status == pulp.LpSolutionOptimal:
        return _outcome("optimal", problem, None)
    if sol_status == pulp.LpSolutionIntegerFeasible:
        return _outcome("time_limit", problem, _cbc_bound(log), "CBC stopped at a limit with an incumbent")
    if sol_status == pulp.LpSolutionInfeasible or problem.status == pulp.LpStatusInfeasible:
        return _outcome("infeasible", problem, None, "CBC proved the model infeasible")
    if "Stopped" in log:
        return _outcome("failed", problem, None, "CBC stopped at a limit before finding a solution")
    return _outcome("failed", problem, None,
                    f"CBC ended with status {pulp.LpStatus[problem.status]!r}")


def _cbc_bound(log: str) -> float | None:
    """CBC's best bound from its closing report (``Lower bound: ...``), when it printed one."""
    found = re.findall(r"^Lower bound:\s+(\S+)", log, flags=re.MULTILINE)
    try:
        return float(found[-1]) if found else None
    except ValueError:
        return None
