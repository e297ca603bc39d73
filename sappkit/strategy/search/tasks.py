"""What the search's workers run: price a shape and bound its strategies, the cheap pass, the balanced pass.

Every function here is a plain top-level function of picklable arguments, so
any :class:`concurrent.futures.Executor` (a process pool, Dask's
``Client.get_executor()``) can run it, and it returns the same numbers
wherever it runs.

- **Shapes** (:func:`price`): compile one shape's layer table, the shared
  work shipped with its strategies.
- **Bounds** (:func:`bound`): bound strategies from their shapes' summaries
  (:mod:`~.bounds`, :mod:`~.even_bounds`), a pipeline's strategies together.
- **The cheap pass** (:func:`even_pass`): the even placement a trainer makes
  by default, every layer on one recompute option, simulated end to end
  (:func:`sappkit.strategy.step.price_plan`): the fastest option whose
  placement fits. Options are tried in the order of their bounds, and the
  pass stops at the first bound no faster than the best step found.
- **The balanced pass** (:func:`balanced_pass`): :func:`sappkit.balance` with
  the step objective choosing the layers and the recompute of every stage
  (so of every layer, among all five options), simulated end to end. Without
  a pipeline there is nothing to place: the cheap pass is the answer.

The balancer's solver runs without a time limit (a node limit instead) on one
thread, so a result never depends on the machine's load. Its nodes cost more
the more cells a pipeline has (its integer program grows with them), so the
limit shrinks with the cells (:func:`solver_for`): the search's balanced pass
is a bounded amount of work at any chunk count, and a plan the limit stops
is the best placement found, not a proven one (its status says so). A time
limit is not used: an exact search it stops leaves no plan at all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from ...balancer import SolverOptions, balance, even_plan
from ...balancer.evaluate import ceiling
from ...balancer.grammar import check_trainer
from ...balancer.plan import ConstraintCost
from ...columns import LAYERS, MEMORY_MB, OPTION, SAPP_OPTIONS
from ...hardware import Cluster
from ...layers import KernelConfig, TransformerConfig
from ...layers.comm import boundary_ms
from ...layers.param_memory import param_bytes
from ..config import Strategy
from ..step import IDLE_MS, price_plan, price_single_stage
from .bounds import PerStrategy, bounds, stack_costs
from .even_bounds import even_bounds
from .shapes import PricedShape, price_shape, shape_parallel

__all__ = ["Setting", "Outcome", "Bounded", "price", "bound", "even_pass", "balanced_pass", "balanced_plan",
           "price_even", "p2p_ms", "recompute_mix", "row_groups",
           "strategy_of", "SOLVER", "NODE_WORK", "solver_for", "STRATEGY_FIELDS", "BALANCED_CHUNKS", "even_placement"]

_MB = 2**20
#: The balancer's solver settings in the search: reproducible whatever the load (module docstring).
SOLVER = SolverOptions(time_limit=None, node_limit=20_000, threads=1)
#: Nodes times cells the solver may spend on one plan (module docstring): 20,000 nodes on one cell, 500 at 40 (a
#: 70B-class model's ``p = 2, v = 20`` plan took 83 CPU s at 20,000 nodes, 10 s at 1,000, to the same step).
NODE_WORK = 20_000
#: The most chunks per stage the balanced pass balances (:mod:`~sappkit.strategy.search.engine`, 4.).
BALANCED_CHUNKS = 4
#: The fields of a strategy row, in the order tasks receive them (after the row's index).
STRATEGY_FIELDS = ("tensor_parallel", "pipeline_parallel", "virtual_stages", "data_parallel", "context_parallel",
                   "expert_parallel", "expert_tensor_parallel", "micro_batch_size", "zero", "sequence_parallel",
                   "reshard_after_forward", "tp_comm_overlap", "cp_kind", "schedule")
#: The most (shape, dp, ZeRO, resharding) a worker keeps worked out for a search (:func:`_memo`).
_MEMO_SIZE = 65536
#: The fields of a row that are switches, and those that are names (the rest are whole numbers).
_SWITCH_FIELDS, _NAME_FIELDS = ("sequence_parallel", "reshard_after_forward", "tp_comm_overlap"), ("cp_kind",
                                                                                                   "schedule")


@dataclass(frozen=True)
class Setting:
    """What every task of one search shares."""

    models: tuple[TransformerConfig, ...]
    cluster: Cluster
    global_batch: int
    memory_mb: float
    dtype: str
    kernels: KernelConfig | None = None
    fp8_recipe: str | None = None


@dataclass(frozen=True)
class Bounded:
    """Per strategy (in the order given), its bounds."""

    memory_mb: np.ndarray
    """The least peak memory of any placement and recompute (:mod:`~.bounds`)."""
    time_ms: np.ndarray
    """The least step time of any placement and recompute that fits (:mod:`~.bounds`)."""
    even_ms: np.ndarray
    """``[strategy, option]``: the least step of the even placement under each option, ``inf`` where it cannot fit
    (:mod:`~.even_bounds`)."""


@dataclass(frozen=True)
class Outcome:
    """One strategy priced: its step (``inf`` when nothing fits) and what the frame shows of it."""

    index: int
    placement: str
    """``"even"`` or ``"balanced"``."""
    step_ms: float
    peak_memory_mb: float
    bubble: float
    """The share of the step the stages spend idle (pipeline bubbles and waiting), averaged over the stages."""
    recompute: str
    """The option every layer runs (even), or the layers per option (balanced: ``"none 70, full 10"``)."""
    message: str = ""
    """Why nothing fits, where nothing does."""
    plan: object = None
    """The balanced pass's :class:`~sappkit.Plan` (balanced outcomes only): shipped back with the outcome, so
    that the result's ``plan(row)`` is this one rather than a second solve."""


def price(setting: Setting, shape: tuple) -> PricedShape:
    """Compile one shape's layer table: the search's shared work."""
    return price_shape(setting.models, shape, setting.cluster, setting.kernels, setting.dtype,
                       setting.fp8_recipe)


def bound(setting: Setting, costs: dict, rows: pd.DataFrame) -> Bounded:
    """Bound strategies (``rows``: the strategy columns, ``micro_batches`` and ``shape``, an index into ``costs``,
    a dict of shape index to the shape tuple and its :class:`~.shapes.ShapeCosts` and table constant).

    What a device holds of the parameters, and under ZeRO 3 the layers' times (:meth:`~.shapes.ShapeCosts.under`),
    are worked out once per shape, ``dp``, ZeRO stage and resharding among ``rows``, the transfer between stages
    once per shape, ``dp`` and ``p``, and the bounds once per pipeline."""
    n = len(rows)
    shape, dp, zero, p, reshard = (rows[key].to_numpy() for key in ("shape", "data_parallel", "zero",
                                                                    "pipeline_parallel", "reshard_after_forward"))
    held, where, memo = [], np.empty(n, dtype=int), _memo(setting)
    for i, ((k, d, z, r), at) in enumerate(row_groups(shape, dp, zero, reshard)):
        key = (costs[k][0], d, z, r)
        if key not in memo:
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[key] = _held(setting, costs[k][0], costs[k][1], d, z, r)
        held.append((*memo[key], costs[k][2]))
        where[at] = i
    p2p = np.empty(n)
    for (k, d, stages), at in row_groups(shape, dp, p):
        p2p[at] = boundary_ms(setting.models[-1], shape_parallel(costs[k][0], d, 1, setting.dtype, setting.fp8_recipe),
                              setting.cluster, int(stages))
    params = np.array([params for _, params, _, _ in held])[where]
    ends = np.array([ends for _, _, ends, _ in held])[where]
    const = np.array([const for _, _, _, const in held])[where]
    stacked = stack_costs([summary for summary, _, _, _ in held])
    memory, time, even = np.empty(n), np.empty(n), np.empty((n, len(SAPP_OPTIONS)))
    keys = [rows[key].to_numpy() for key in ("schedule", "pipeline_parallel", "virtual_stages", "micro_batches")]
    for (schedule, stages, chunks, m), at in row_groups(*keys):
        values = PerStrategy.gather(stacked, where[at], params=params[at], head_mb=ends[at, 0], tail_mb=ends[at, 1],
                                    const_mb=const[at], p2p_ms=p2p[at])
        found = bounds(schedule, int(stages), int(chunks), int(m), values, setting.memory_mb)
        memory[at], time[at] = found.memory_mb, found.time_ms
        even[at] = even_bounds(schedule, int(stages), int(chunks), int(m), values, setting.memory_mb)
    return Bounded(memory, time, even)


@lru_cache(maxsize=4)
def _memo(setting: Setting) -> dict:
    """What :func:`_held` worked out in this process for a search's ``setting``, per (shape, ``dp``, ZeRO stage,
    resharding): a worker meets the same ones in task after task (a shape's strategies at one ``p`` span the
    pipelines of every schedule, chunk count and micro-batch count), and works each out once (at most
    :data:`_MEMO_SIZE` kept)."""
    return {}


def _held(setting: Setting, shape: tuple, summary, dp: int, zero: int, reshard: bool) -> tuple:
    """What the bounds read of a shape's :class:`~.shapes.ShapeCosts` ``summary`` at ``dp``, ``zero`` and
    ``reshard`` (``reshard_after_forward``): the summary with its times there (:meth:`~.shapes.ShapeCosts.under`),
    the MB a body layer of each kind holds of its parameters, and the head's and the tail's parameters and what
    they keep once, MB."""
    parallel = shape_parallel(shape, dp, zero, setting.dtype, setting.fp8_recipe, reshard_after_forward=reshard)
    params = [param_bytes(dense, expert, parallel)[0] / _MB
              for dense, expert in zip(summary.dense_params, summary.expert_params)]
    ends = [param_bytes(end[4], 0.0, parallel, body=False)[0] / _MB + end[3] for end in (summary.head, summary.tail)]
    return summary.under(parallel, setting.cluster), params, ends


def row_groups(*columns: np.ndarray) -> list[tuple[tuple, np.ndarray]]:
    """The distinct rows of ``columns`` (arrays of one length) as tuples of Python scalars, each with the positions
    where it occurs (ascending)."""
    codes = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:  # one code per distinct row: the columns' codes as the digits of a number
        digits, values = pd.factorize(column)
        codes = codes * len(values) + digits
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    at = np.split(order, np.flatnonzero(np.diff(inverse[order])) + 1)
    return list(zip(zip(*(column[first].tolist() for column in columns)), at))  # as Python scalars


def strategy_of(row: tuple, dtype: str, fp8_recipe: str | None = None) -> Strategy:
    """The :class:`~sappkit.Strategy` of a task's row (its index, then :data:`STRATEGY_FIELDS`)."""
    values = dict(zip(STRATEGY_FIELDS, row[1:]))
    return Strategy(**{key: (str(value) if key in _NAME_FIELDS else bool(value) if key in _SWITCH_FIELDS
                             else int(value)) for key, value in values.items()}, dtype=dtype,
                    fp8_recipe=fp8_recipe)


def even_pass(setting: Setting, priced: PricedShape, rows: list[tuple], even_ms: np.ndarray) -> list[Outcome]:
    """The cheap pass (module docstring) on strategies of one shape: rows ``(index, *STRATEGY_FIELDS)`` and their
    even bounds per option (``[row, option]``)."""
    return [_even(setting, priced, row, bound) for row, bound in zip(rows, even_ms)]


def _even(setting: Setting, priced: PricedShape, row: tuple, bound: np.ndarray) -> Outcome:
    strategy = strategy_of(row, setting.dtype, setting.fp8_recipe)
    layers = priced.compiled.table(strategy.parallel, setting.cluster)
    best = None
    for option in np.argsort(bound, kind="stable"):
        # the option's step is at least its bound: once that bound is no faster than the best step, stop
        if not np.isfinite(bound[option]) or (best is not None and bound[option] >= best[0].step_time):
            break
        name = SAPP_OPTIONS[option]
        result = price_even(setting, strategy, layers, name)
        if result is not None and (best is None or result.step_time < best[0].step_time):
            best = (result, name)
    if best is None:
        return Outcome(row[0], "even", np.inf, np.nan, np.nan, "", "no recompute option's even placement fits")
    return _outcome(row[0], "even", *best)


def price_even(setting: Setting, strategy: Strategy, layers, option: str):
    """The even placement of ``strategy`` with every body layer on ``option``, simulated end to end
    (:class:`~sappkit.strategy.step.Priced`), or None when it does not fit the device."""
    m = strategy.micro_batches(setting.global_batch)
    if strategy.pipeline_parallel == 1:
        result = price_single_stage(layers, strategy, setting.cluster, micro_batches=m, option=option,
                                    memory_mb=setting.memory_mb)
        return result if bool((result.stages[MEMORY_MB] <= ceiling(setting.memory_mb)).all()) else None
    plan = even_plan(layers, option=option, stages=strategy.pipeline_parallel, micro_batches=m,
                     memory_mb=setting.memory_mb, chunks=strategy.virtual_stages, schedule=strategy.schedule)
    return price_plan(plan, layers, strategy, setting.cluster, p2p_ms=p2p_ms(setting, strategy)) \
        if plan.fits else None


def balanced_pass(setting: Setting, priced: PricedShape, row: tuple) -> Outcome:
    """The balanced pass (module docstring) on one strategy with a pipeline, a row as :func:`even_pass` takes."""
    strategy = strategy_of(row, setting.dtype, setting.fp8_recipe)
    layers = priced.compiled.table(strategy.parallel, setting.cluster)
    plan = balanced_plan(setting, strategy, layers)
    if not plan.has_plan:
        return Outcome(row[0], "balanced", np.inf, np.nan, np.nan, "", plan.message or plan.describe(), plan)
    result = price_plan(plan, layers, strategy, setting.cluster, p2p_ms=p2p_ms(setting, strategy))
    return replace(_outcome(row[0], "balanced", result, recompute_mix(plan)), plan=plan)


def recompute_mix(plan) -> str:
    """A plan's body layers per recompute option, in words: ``"none 70, full 10"``."""
    per_option = plan.assignment.groupby(OPTION)[LAYERS].sum()
    return ", ".join(f"{option} {int(per_option[option])}" for option in SAPP_OPTIONS if option in per_option)


def solver_for(strategy: Strategy) -> SolverOptions:
    """:data:`SOLVER` with its node limit shrunk to :data:`NODE_WORK` over the strategy's cells (module docstring).

    Examples
    --------
    >>> solver_for(Strategy(pipeline_parallel=2, virtual_stages=20, schedule="interleaved")).node_limit
    500
    """
    cells = strategy.pipeline_parallel * strategy.virtual_stages
    return replace(SOLVER, node_limit=min(SOLVER.node_limit, NODE_WORK // cells))


def balanced_plan(setting: Setting, strategy: Strategy, layers, trainer: str | None = None):
    """The balancer's plan for a strategy (step objective, every recompute option; only what ``trainer`` states);
    past :data:`BALANCED_CHUNKS` chunks, the fastest even placement that fits (:func:`even_placement`)."""
    if strategy.virtual_stages > BALANCED_CHUNKS:
        return even_placement(setting, strategy, layers, trainer)
    return balance(layers, stages=strategy.pipeline_parallel, micro_batches=strategy.micro_batches(
        setting.global_batch), memory_mb=setting.memory_mb, chunks=strategy.virtual_stages,
        schedule=strategy.schedule, objective="step", trainer=trainer, solver=solver_for(strategy))


def even_placement(setting: Setting, strategy: Strategy, layers, trainer: str | None = None):
    """The even placement of ``strategy`` on the recompute option whose simulated step is fastest among those that
    fit (:func:`price_even`, as the cheap pass prices it); where none fits, the least-memory option's (its plan says
    it does not fit). Every trainer states an even placement on one option, so with ``trainer`` (checked against
    the schedule) the plan carries a ``constraint_cost`` of nothing."""
    if trainer is not None:
        trainer = check_trainer(trainer, strategy.schedule, False)
    options = [option for option in SAPP_OPTIONS if all(option in layers.options(kind) for kind in layers.body_kinds)]
    priced = [(option, price_even(setting, strategy, layers, option)) for option in options]
    fitting = [(option, result) for option, result in priced if result is not None]
    if not fitting:
        return even_plan(layers, option=options[-1], stages=strategy.pipeline_parallel,
                         micro_batches=strategy.micro_batches(setting.global_batch), memory_mb=setting.memory_mb,
                         chunks=strategy.virtual_stages, schedule=strategy.schedule)
    option, result = min(fitting, key=lambda pair: pair[1].step_time)
    if trainer is None:
        return result.plan
    return replace(result.plan, constraint_cost=ConstraintCost(
        trainer=trainer, policy=f"uniform {option}", unconstrained=float(result.plan.objective),
        constrained=float(result.plan.objective), time_unit=result.plan.time_unit,
        objective=result.plan.objective_name))


def p2p_ms(setting: Setting, strategy: Strategy) -> float:
    """One activation's transfer between two of the strategy's pipeline stages, ms."""
    return boundary_ms(setting.models[-1], strategy.parallel, setting.cluster, strategy.pipeline_parallel)


def _outcome(index: int, placement: str, result, recompute: str) -> Outcome:
    idle = result.breakdown[IDLE_MS].to_numpy()
    return Outcome(index, placement, float(result.step_time), float(result.stages[MEMORY_MB].max()),
                   float(idle.mean() / result.step_time), recompute)
