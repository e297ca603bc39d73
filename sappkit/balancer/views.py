"""The balancer's views for notebooks and dashboards: memory sweeps, plan comparisons, the dashboard's callback.

- :func:`sweep_memory`: objective and simulated step time against the
  memory limit, largest limit first so that an optimal plan that still fits
  a smaller limit is reused (it is optimal there too), with one cache of
  stage enumerations for the whole sweep.
- :func:`compare_plans`: labelled plans side by side (status, objective,
  simulated step time, peak memory against the limit).
- :func:`even_plan`: the even partition under one option, as a plan (what
  SAPP users compare a balanced plan with).
- :func:`dashboard_plan`: what the balance dashboard computes for its controls.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .._check import check_bool, check_numbers, short
from ..columns import LIMIT_MB, MEMORY_MB, RECOMPUTE_TIME
from ..errors import InputError
from ..layers.units import UNSTATED, format_mb, format_time, with_time_unit
from ..limits import MAX_MEMORY_MB, MAX_SWEEP_POINTS
from ..pipeline.costs import even_assignment
from ..pipeline.schedules import check_simulated, schedule_chunks
from . import exact
from .evaluate import counts_from_assignment
from .optimise import balance, balance_reusing
from .plan import Plan, make_plan
from .setup import make_setup

__all__ = ["sweep_memory", "compare_plans", "even_plan", "dashboard_plan", "SWEEP_COLUMNS", "COMPARE_COLUMNS"]


#: Columns of :func:`sweep_memory`'s frame.
SWEEP_COLUMNS = ("memory_mb", "status", "objective", "step_time", "peak_mb", "memory_needed_mb",
                 "solve_seconds", "method")


def sweep_memory(layers, *, memory_mb: Sequence[float], progress: bool | None = None, **options) -> pd.DataFrame:
    """Objective and simulated step time against the memory limit.

    Parameters
    ----------
    layers : LayerTable or DataFrame
    memory_mb : sequence of float
        The limits to solve at.
    progress : bool, optional
        Show progress (a bar in a notebook, a line on the terminal); by
        default only once the sweep has taken more than a second.
    **options
        :func:`balance`'s other arguments (``stages``, ``micro_batches``, ...).

    Returns
    -------
    DataFrame
        One row per limit, ascending: ``memory_mb``, ``status``,
        ``objective``, ``step_time`` (simulated; NaN without a plan),
        ``peak_mb`` (the plan's largest stage), ``memory_needed_mb`` (for
        infeasible limits), ``solve_seconds``, ``method`` (``"reused"`` where
        the ``sapp`` plan of a larger limit fitted and so is optimal here too;
        ``step`` sweeps solve every limit: their plans come from a search,
        not a proof, so a larger limit's plan says nothing about a smaller's).
        Times (``objective``, ``step_time``) are in the layer table's unit,
        which the frame carries in ``attrs["time_unit"]``.

    Examples
    --------
    >>> rows = [dict(kind="block", role="body", count=8, param_mb=100, option=o,
    ...              forward_time=1, backward_time=b, activation_mb=a)
    ...         for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> frame = sweep_memory(pd.DataFrame(rows), memory_mb=[400, 600, 1000], stages=2, micro_batches=4)
    >>> frame[["memory_mb", "status", "objective", "step_time"]].values.tolist()
    [[400.0, 'infeasible', nan, nan], [600.0, 'optimal', 15.0, 73.0], [1000.0, 'optimal', 12.0, 60.0]]
    """
    limits = sorted(check_numbers("memory_mb", memory_mb, maximum_count=MAX_SWEEP_POINTS, maximum=MAX_MEMORY_MB))
    unknown = [name for name in options if name not in _BALANCE_OPTIONS]
    if unknown:
        raise InputError(f"sweep_memory got {unknown[0]!r}, which is not one of balance's arguments "
                         f"({', '.join(_BALANCE_OPTIONS)})")
    if progress is not None:
        check_bool("progress", progress)
    # Every plan is simulated: refuse a pipeline too long to simulate before solving anything.
    setup = make_setup(layers, memory_mb=limits[0], **{k: v for k, v in options.items() if k != "solver"})
    check_simulated(setup.stages, setup.micro_batches, setup.chunks, setup.seq_split)
    cache = exact.Cache()
    # tqdm.auto: a bar in a notebook, a line on the terminal; shown after a second unless asked for.
    reporter = tqdm(total=len(limits), desc="sweep_memory", unit="limit", disable=progress is False,
                    delay=0.0 if progress else 1.0, leave=False)
    rows, previous = [], None
    # Largest limit first: an optimal plan that fits a smaller limit is optimal there too.
    for limit in reversed(limits):
        if (previous is not None and previous.objective_name == "sapp" and previous.status == "optimal"
                and previous.stages[MEMORY_MB].max() <= limit):
            stages = previous.stages.assign(**{LIMIT_MB: limit})
            plan = replace(previous, stages=stages, setup=replace(previous.setup, memory_mb=limit),
                           solve_seconds=0.0, method="reused", _step_time=rows[-1]["step_time"])
        else:
            plan = balance_reusing(cache, layers, memory_mb=limit, **options)
        previous = plan
        rows.append(_sweep_row(limit, plan))
        reporter.update()
    reporter.close()
    return with_time_unit(pd.DataFrame(rows[::-1], columns=list(SWEEP_COLUMNS)), setup.layers.time_unit)


def _sweep_row(limit: float, plan: Plan) -> dict:
    placed = plan.counts is not None and plan.status != "infeasible"
    return dict(memory_mb=limit, status=plan.status,
                objective=np.nan if plan.objective is None else plan.objective,
                step_time=plan.step_time if placed else np.nan,
                peak_mb=float(plan.stages[MEMORY_MB].max()) if placed else np.nan,
                memory_needed_mb=np.nan if plan.memory_needed_mb is None else plan.memory_needed_mb,
                solve_seconds=plan.solve_seconds, method=plan.method)


#: balance's arguments a sweep passes on (every one but the memory limit).
_BALANCE_OPTIONS = tuple(name for name in inspect.signature(balance).parameters
                         if name not in ("layers", "memory_mb"))


#: Columns of :func:`compare_plans`'s frame.
COMPARE_COLUMNS = ("plan", "status", "objective", "step_time", "recompute_time", "peak_mb", "limit_mb", "fits")


def compare_plans(plans: Mapping[str, Plan]) -> pd.DataFrame:
    """Labelled plans side by side.

    Returns
    -------
    DataFrame
        One row per plan: ``plan`` (its label), ``status``, ``objective``
        (the plan's own objective; NaN without a plan), ``step_time``
        (simulated), ``recompute_time`` (all stages, per micro-batch),
        ``peak_mb`` (largest stage), ``limit_mb``, ``fits``; times in the
        plans' unit (``attrs["time_unit"]``; plans in different units are
        refused).
    """
    if not isinstance(plans, Mapping):
        raise InputError(f"plans must be a mapping of label to Plan, e.g. {{'balanced': plan}}; got {short(plans)}")
    rows, units = [], set()
    for label, plan in plans.items():
        if not isinstance(plan, Plan):
            raise InputError(f"plans[{short(label)}] must be a Plan (from balance or plan_from_offsets); "
                             f"got {type(plan).__name__}")
        units.add(plan.time_unit)
        if plan.counts is None:
            rows.append(dict(plan=label, status=plan.status, objective=np.nan, step_time=np.nan,
                             recompute_time=np.nan, peak_mb=np.nan, limit_mb=plan.setup.memory_mb, fits=False))
            continue
        rows.append(dict(plan=label, status=plan.status,
                         objective=np.nan if plan.objective is None else plan.objective,
                         step_time=plan.step_time,
                         recompute_time=float(plan.stages[RECOMPUTE_TIME].sum()),
                         peak_mb=float(plan.stages[MEMORY_MB].max()), limit_mb=plan.setup.memory_mb,
                         fits=plan.fits))
    if len(units) > 1:
        raise InputError(f"plans have times in different units ({', '.join(map(repr, sorted(units)))}); compare "
                         "plans of layer tables in one unit")
    return with_time_unit(pd.DataFrame(rows, columns=list(COMPARE_COLUMNS)), units.pop() if units else UNSTATED)


def even_plan(layers, *, option: str, stages, micro_batches, memory_mb, chunks=1, schedule=None,
              objective="sapp", **options) -> Plan:
    """The even partition (:func:`sappkit.even_assignment`) with every layer on ``option``, as a plan.

    Its status is ``"evaluated"``; ``options`` are :func:`sappkit.balance`'s.

    Examples
    --------
    >>> rows = [dict(kind="block", role="body", count=8, param_mb=100, option=o,
    ...              forward_time=1, backward_time=b, activation_mb=a)
    ...         for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> even_plan(pd.DataFrame(rows), option="full", stages=2, micro_batches=4, memory_mb=1000).objective
    16.0
    """
    setup = make_setup(layers, stages=stages, micro_batches=micro_batches, memory_mb=memory_mb, chunks=chunks,
                       schedule=schedule, objective=objective, **options)
    assignment = even_assignment(setup.layers, stages=setup.stages, chunks=setup.chunks, schedule=setup.schedule,
                                 option=option)
    return make_plan(setup, counts_from_assignment(setup, assignment), status="evaluated", gap=None,
                     solve_seconds=0.0, method=f"even, {option}", notes=setup.notes)



def dashboard_plan(layers, *, schedule: str, stages: int, chunks: int, micro_batches: int, memory_mb: float,
                   objective: str = "sapp", cache: dict | None = None) -> tuple[Plan | None, str]:
    """The balance dashboard's computation: the plan for its controls and a one-line status.

    The status leads with the plan's simulated step time (what the plan
    costs; also the returned plan's ``step_time``), then its objective (or,
    for ``step``, its proven lower bound and the gap), its peak memory
    against the limit and how it was found.
    ``chunks`` applies to ``interleaved`` and ``seqpipe``; ``1f1b`` runs one
    chunk and ``dualpipev`` two. Refused settings give ``(None, message)``.
    ``cache`` (a dict the dashboard keeps) holds the search's enumerations per
    pipeline, so moving the memory slider reuses them.

    Examples
    --------
    >>> rows = [dict(kind="block", role="body", count=8, param_mb=100, option=o,
    ...              forward_time=1, backward_time=b, activation_mb=a)
    ...         for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    >>> plan, status = dashboard_plan(pd.DataFrame(rows), schedule="1f1b", stages=2, chunks=3,
    ...                               micro_batches=4, memory_mb=400)
    >>> status
    'infeasible: no placement fits 400 MB; the least-memory placement needs 490 MB on stage 0'
    """
    chunks = schedule_chunks(schedule, chunks)
    key = (schedule, stages, chunks, micro_batches, objective)
    search_cache = None if cache is None else cache.setdefault(key, exact.Cache())
    try:
        plan = balance_reusing(search_cache, layers, schedule=schedule, stages=stages, chunks=chunks,
                               micro_batches=micro_batches, memory_mb=memory_mb, objective=objective)
    except InputError as error:
        return None, str(error)
    if plan.counts is None or plan.status == "infeasible":
        return plan, f"{plan.status}: {plan.message}"
    peak = plan.stages[MEMORY_MB]
    unit = plan.time_unit
    if plan.objective_name == "step" and plan.lower_bound is not None:
        value = f"proven lower bound {format_time(plan.lower_bound, unit)}, gap {plan.gap:.1%}"
    else:
        value = f"{plan.objective_name} objective {format_time(plan.objective, unit)}"
    text = (f"{plan.status}: simulated step time {format_time(plan.step_time, unit)} ({value}), peak "
            f"{format_mb(peak.max())} on stage {int(peak.to_numpy().argmax())} of {format_mb(memory_mb)}, "
            f"{plan.method}")
    return plan, text
