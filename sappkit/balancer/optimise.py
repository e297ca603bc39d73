"""The ILP balancer: how many body layers, under which recompute, on each (chunk, stage).

:func:`balance` decides, for every cell, how many layers of each body kind
run each recompute option so that every stage fits the device and the step
is fastest (SAPP's pipeline balancer; docs/design.md "The routes through the
balancer"). Two routes reach the same proven optimum:

- the **exact searches** (:mod:`sappkit.balancer.exact`, whose docstring
  says which covers which case), levels 0 and 1: for one body kind, one
  or two kinds over several chunks, or several kinds on one chunk, a
  dynamic program over stages on Pareto-optimal cell contents. They are exact for
  the model, with or without the working set; they prove most instances in
  well under a second and otherwise hand the integer program a proven lower
  bound and an incumbent;
- the **integer program** (:mod:`sappkit.balancer.ilp`; HiGHS or CBC through PuLP) for
  everything else.

Objective ``step`` is the simulated step time, the longest path through the
schedule's graph (:mod:`sappkit.balancer.step`). With one chunk (1F1B,
SeqPipe) an exact search over the stages' contents proves the optimum
(:mod:`sappkit.balancer.step.proof`); with more, a local search on the exact
step time runs from several starts (:mod:`sappkit.balancer.step.starts`: the
``sapp`` optimum, the fastest even plan that fits, the least busiest-stage
work), and a linear relaxation over the schedule's paths proves a lower bound
(:mod:`sappkit.balancer.step.bound`).

Infeasible instances come back as a :class:`~sappkit.Plan` with status
``"infeasible"``, the least ``memory_mb`` that would fit and the stage that
sets it. ``views`` builds the notebook's views on top (memory sweeps, plan
comparisons, the dashboard's callback).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from ..columns import MEMORY_MB
from ..errors import InputError
from ..layers.units import format_mb
from ..pipeline.schedules import check_one_copy
from . import exact
from .step.bound import step_lower_bound
from .evaluate import evaluate
from .grammar import within_grammar
from .ilp.program import BalanceModel
from .step.local_search import improve
from .plan import Plan, make_plan
from .setup import BalanceSetup, make_setup
from .ilp.solver import SolverOptions, solve
from .step.steptime import step_timer
from .step import proof as exact_step
from .step.contents import why_not_applicable as why_no_contents
from .step.starts import start_placements

__all__ = ["balance", "balance_reusing", "optimise", "least_memory", "Solved", "START_SPLIT_BUDGET"]

#: Bounds the ``m = p`` split search tries for an unproven start (``optimise(prove=False)``) rather than its 60:
#: on the step bench's ``m = p`` cases about half the CPU time, a ``sapp`` objective within 1 % of the optimum
#: (15 bounds saved more, but left one stress case's step plan 0.6 % slower than its reference).
START_SPLIT_BUDGET = 30


@dataclass(frozen=True)
class Solved:
    """One optimisation's outcome, before it becomes a :class:`Plan`."""

    status: str
    counts: np.ndarray | None
    objective: float | None
    bound: float | None
    gap: float | None
    seconds: float
    method: str
    message: str = ""


def _structural_problem(setup: BalanceSetup) -> str:
    """Why no memory limit could give a plan, or '' (too few layers for the cells)."""
    needed = len(setup.cells) - len(setup.reserved)
    if setup.layers.body_layers < needed:
        return (f"the model has {setup.layers.body_layers} body layers but the pipeline has {needed} cells "
                "that must each hold one; use fewer stages or chunks")
    return ""


def _past_time_limit(start: float, options: SolverOptions) -> bool:
    """Whether a search that began at ``start`` (:func:`time.perf_counter`) is past ``options.time_limit``."""
    return options.time_limit is not None and time.perf_counter() - start >= options.time_limit


def optimise(setup: BalanceSetup, options: SolverOptions, *, cache: exact.Cache | None = None,
             prove: bool = True) -> Solved:
    """Minimise the ``sapp`` objective within ``setup.memory_mb``: exact search first, the ILP where needed.

    With ``prove=False`` an exact search that holds a placement but did not prove it optimal answers
    alone, status ``"feasible"`` with its gap, and the ILP that would prove it does not run: a start for the
    ``step`` objective's search, which needs a good placement, not a proof (the ILP took 5.5 CPU s of the
    step bench's case 8 to prove the exact search's placement optimal)."""
    start = time.perf_counter()
    problem = _structural_problem(setup)
    if problem:
        return Solved("infeasible", None, None, None, None, 0.0, "check", problem)
    cache = cache if cache is not None else exact.Cache()
    cache.deadline = None if options.time_limit is None else time.monotonic() + options.time_limit
    cache.split_budget = None if prove else START_SPLIT_BUDGET
    try:
        search = exact.search(setup, cache=cache, prove=prove)
    finally:
        cache.deadline, cache.split_budget = None, None
    if search is None and _past_time_limit(start, options):
        # as the ILP reports a limit reached without an incumbent
        return Solved("failed", None, None, None, None, time.perf_counter() - start, "exact search",
                      f"the exact search ran past the {options.time_limit:g} s time limit before it proved a plan; "
                      "allow it more time (SolverOptions.time_limit, --time-limit)")
    if search is not None and search.proven:
        status = "optimal" if search.counts is not None else "infeasible"
        message = "" if search.counts is not None else "no placement fits the memory limit"
        return Solved(status, search.counts, search.upper, search.lower, 0.0 if search.counts is not None else None,
                      time.perf_counter() - start, "exact search", message)
    if search is not None and search.counts is not None and not prove:
        gap = max(0.0, search.upper - search.lower) / max(abs(search.upper), 1e-12)
        return Solved("feasible", search.counts, search.upper, search.lower, gap, time.perf_counter() - start,
                      f"exact search, not proven: gap {gap:.1%}")
    model = BalanceModel(setup)
    method = f"ilp ({options.solver})"
    if search is not None:
        model.add_objective_bounds(search.lower, search.upper)
        method += " bounded by exact search"
    result = solve(model.problem, options)
    counts = model.counts() if result.has_solution else None
    objective, bound = result.objective, result.bound
    if search is not None and search.counts is not None and (counts is None or search.upper <= objective):
        counts, objective = search.counts, search.upper
    if search is not None and bound is not None:
        bound = max(bound, search.lower)
    status = result.status
    gap = result.gap
    if counts is not None and objective is not None and bound is not None:
        gap = max(0.0, objective - bound) / max(abs(objective), 1e-12)
        status = "optimal" if gap <= options.gap + 1e-9 or status == "optimal" else "time_limit"
    return Solved(status, counts, objective, bound, gap, time.perf_counter() - start, method, result.message)


def least_memory(setup: BalanceSetup, options: SolverOptions, *,
                 cache: exact.Cache | None = None) -> tuple[np.ndarray | None, float | None, str]:
    """The placement with the smallest largest-stage memory (time ignored), its memory and how it was found."""
    if _structural_problem(setup):
        return None, None, ""
    found = exact.least_memory(setup, cache=cache)
    if found is not None:
        return found, float(evaluate(setup, found).stages[MEMORY_MB].max()), ""
    model = BalanceModel(setup, memory="minimise")
    result = solve(model.problem, options)
    if not result.has_solution:
        return None, None, result.message
    counts = model.counts()
    note = "" if result.status == "optimal" else f"least memory not proven ({result.message})"
    return counts, float(evaluate(setup, counts).stages[MEMORY_MB].max()), note


def _plan(setup: BalanceSetup, solved: Solved, options: SolverOptions, cache) -> Plan:
    if solved.counts is not None:
        return make_plan(setup, solved.counts, status=solved.status, gap=solved.gap,
                         solve_seconds=solved.seconds, method=solved.method, message=solved.message,
                         notes=setup.notes)
    if solved.status != "infeasible":
        return make_plan(setup, None, status=solved.status, gap=None, solve_seconds=solved.seconds,
                         method=solved.method, message=solved.message, notes=setup.notes)
    counts, needed, note = least_memory(setup, options, cache=cache)
    notes = setup.notes + ((note,) if note else ())
    if counts is None:
        return make_plan(setup, None, status="infeasible", gap=None, solve_seconds=solved.seconds,
                         method=solved.method, message=solved.message, notes=notes)
    binding = int(evaluate(setup, counts).stages[MEMORY_MB].to_numpy().argmax())
    plan = make_plan(setup, counts, status="infeasible", gap=None, solve_seconds=solved.seconds,
                     method=solved.method, notes=notes, memory_needed_mb=needed, binding_stage=binding,
                     message=f"no placement fits {format_mb(setup.memory_mb)}; the least-memory placement needs "
                             f"{format_mb(needed)} on stage {binding}")
    return replace(plan, objective=None)


def balance(layers, *, stages, micro_batches, memory_mb, chunks=1, schedule=None, less_memory=False,
            seq_split=1, seq_params=None, const_mb=None, objective="sapp", optimization_level=1,
            consistent_recompute=True, working_set=True, sapp_compat=False, trainer=None,
            solver: SolverOptions | None = None) -> Plan:
    """Place the body layers and their recompute on the pipeline cells: fit the device, minimise time.

    Parameters
    ----------
    layers : LayerTable or DataFrame
        The layer table (``read_layers_json``, ``estimate_layers`` or a memory fit).
    stages, micro_batches, chunks : int
        ``p``, ``m`` and ``v``.
    memory_mb : float
        Device memory every stage must fit.
    schedule : str, optional
        One of :data:`sappkit.pipeline.schedules.SCHEDULES` but ``"dualpipe"``
        (DeepSeek's two model copies in opposite directions, which
        :func:`sappkit.simulate` runs on per-cell costs but the balancer does
        not place): ``"1f1b"``, ``"interleaved"``, ``"dualpipev"``,
        ``"seqpipe"``, and the orders PyTorch runs, ``"gpipe"``,
        ``"looped_bfs"``, ``"zb_interleaved"``, ``"zbv"``,
        ``"dualpipev_split"``. Default ``"1f1b"`` for one chunk,
        ``"interleaved"`` for more.
    less_memory : bool
        The less-memory interleaved variant.
    seq_split : int
        SeqPipe's slices per micro-batch ``k``; needs ``seq_params``
        (``batch_size``, ``num_heads``, ``seq_length``, ``head_dim``,
        ``hidden_size``, ``vocab_size``, ``model_parallel``, optional
        ``ffn_size``) and drops full recompute.
    const_mb : float, optional
        Per-stage constant memory; default the table's (``stage_const_mem``).
    objective : {"sapp", "step"}
        ``"sapp"``: SAPP's pipeline balancer's time model at ``optimization_level``
        (docs/design.md "Time and the objectives"). ``"step"``: the simulated step time itself
        (:meth:`Plan.simulate`'s ``step_time``, computed exactly as a longest
        path through the schedule): with one chunk the proven optimum (status
        ``"optimal"``, gap 0, within the search's budgets), with more a local
        search on it from the ``sapp`` optimum and other starts; never slower
        than the ``sapp`` optimum or the even plan that fits;
        ``plan.lower_bound`` is a proven bound, ``plan.gap`` the gap to it,
        ``plan.method`` the start and the changes that reached the plan.
    optimization_level : int
        0, 1 (default) or >= 2, as in SAPP's pipeline balancer.
    consistent_recompute : bool
        MindFormers' recompute-consistency rule across body kinds (two options only).
    working_set : bool
        Charge every stage the end-of-warm-up working set of the layer that
        ends its warm-up (default), as the recompute chooser and the
        simulator do, so a plan that fits here fits there. ``False`` drops
        it: SAPP's pipeline balancer's memory model.
    sapp_compat : bool
        With ``working_set=False`` and the ``sapp`` objective on SAPP's four
        schedules: SAPP's pipeline balancer's own numbers exactly, where they
        differ from sappkit's physical ones: 1F1B and one-chunk SeqPipe
        charge ``p - s`` (``p - s + k - 1``) micro-batches in flight even
        when the step has fewer (:func:`sappkit.balancer.sapp_compat.sapp_in_flight`), and
        DualPipeV's tail time counts on cell ``(1, p - 1)``, its memory on
        stage 0 (docs/design.md "Where sappkit differs from SAPP, and why").
        Default False: sappkit's counts, capped at ``m``, and the tail on ``(1, 0)``.
    trainer : {"megatron", "torchtitan", "mindformers"}, optional
        Plan only what that trainer's config can state
        (:mod:`sappkit.balancer.grammar`): Megatron-LM one recompute policy
        for the model (one option everywhere, or ``block N``: the first
        ``N`` layers of every chunk ``full``), torchtitan one
        activation-checkpointing mode or every ``N``-th block, MindFormers
        per-cell counts per option as its recompute lists apply them. The
        plan's ``constraint_cost`` says what that costs against the
        unconstrained plan (never negative).
    solver : SolverOptions, optional

    Returns
    -------
    Plan

    Examples
    --------
    >>> import pandas as pd
    >>> rows = [dict(kind="block", role="body", count=8, param_mb=100, option=o,
    ...              forward_time=1, backward_time=b, activation_mb=a)
    ...         for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> plan = balance(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000)
    >>> plan.status, plan.objective, plan.stages["layers"].tolist()
    ('optimal', 12.0, [4, 4])
    >>> small = balance(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=400)
    >>> small.status, small.memory_needed_mb, small.binding_stage
    ('infeasible', 490.0, 0)
    >>> fast = balance(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000, objective="step")
    >>> fast.objective == fast.simulate().step_time, fast.status, fast.lower_bound
    (True, 'optimal', 60.0)
    """
    return balance_reusing(None, **locals())


def balance_reusing(cache: exact.Cache | None, layers, *, solver: SolverOptions | None = None, trainer=None,
                    **arguments) -> Plan:
    """:func:`balance` with the exact search's ``cache`` (stage enumerations) kept across calls on one model, as
    a sweep over memory limits reuses it."""
    options = SolverOptions() if solver is None else solver
    if not isinstance(options, SolverOptions):
        raise InputError(f"solver must be a SolverOptions; got {type(options).__name__}")
    check_one_copy(arguments.get("schedule"), "the balancer")  # its solvers place one copy, unmirrored
    setup = make_setup(layers, **arguments)
    if trainer is not None:
        return within_grammar(trainer, setup, lambda instance: _solve(instance, options, cache))
    return _solve(setup, options, cache)


def _solve(setup: BalanceSetup, options: SolverOptions, cache) -> Plan:
    """The unconstrained plan of ``setup`` for its objective."""
    if setup.objective == "sapp":
        return _plan(setup, optimise(setup, options, cache=cache), options, cache)
    return _fastest(setup, options, cache)


def _fastest(setup: BalanceSetup, options: SolverOptions, cache) -> Plan:
    """Objective ``step``: with one chunk the proven-fastest placement over the stages' contents
    (:mod:`.step.proof`); otherwise the local search on the simulated step time from the ``sapp`` optimum (or
    the exact search's unproven placement: :func:`optimise` with ``prove=False``) and the other starts
    (:mod:`.step.starts`), with the linear relaxation's lower bound."""
    start = time.perf_counter()
    cache = exact.Cache() if cache is None else cache
    one_chunk_proof = not why_no_contents(setup)
    solved = optimise(setup, options, cache=cache, prove=one_chunk_proof)
    if solved.counts is None or solved.status == "infeasible":
        return _plan(setup, solved, options, cache)
    label = "sapp optimum" if solved.status == "optimal" else "sapp incumbent"
    timer = step_timer(setup)
    starts = start_placements(setup, timer, solved.counts, f"{label} ({solved.method})", cache)
    proof = exact_step.search(setup, timer, cache, starts) if one_chunk_proof else None
    if proof is not None:
        gap = (proof.step_time - proof.lower) / proof.step_time
        return make_plan(setup, proof.counts, status="optimal" if proof.proven else "feasible", gap=gap,
                         lower_bound=proof.lower, objective=proof.step_time, _step_time=proof.step_time,
                         solve_seconds=time.perf_counter() - start, method=proof.describe(), notes=setup.notes)
    found = improve(setup, timer, starts)
    bound = step_lower_bound(setup, timer, found.counts)
    bound = None if bound is None else min(bound, found.step_time)
    gap = None if bound is None else (found.step_time - bound) / found.step_time
    proven = gap is not None and gap <= options.gap
    return make_plan(setup, found.counts, status="optimal" if proven else "feasible", gap=gap,
                     lower_bound=bound, objective=found.step_time, _step_time=found.step_time,
                     solve_seconds=time.perf_counter() - start, method=found.describe(), notes=setup.notes)
