"""Event-level simulation of one training step of a pipeline schedule.

Each stage runs its ops in its schedule's order (:mod:`sappkit.pipeline.orders`); an
op starts when its stage is free and its input is ready:

- the forward of (unit, cell) after the forward of the same unit on the cell
  before it in model order (plus ``p2p_time`` when that cell is on another
  stage);
- the backward (or input pass) after the backward or input pass of the same
  unit on the cell after it, or, on the model's last cell, after its own forward;
- a weight pass after its own input pass.

The step time is the last op's end. Memory: a stage holds its static memory
throughout; a forward adds its cell's ``activation_mb`` when it **starts** and
the backward of the same unit releases it when it **ends**; with the backward
split, the input pass releases all but ``weight_pass_mb`` (what the weight
pass still needs, by default everything) and the weight pass the rest. While
a backward (or its input pass) runs it also holds its cell's ``working_mb``
(the working set of the layer it reaches first, :func:`sappkit.cell_costs`),
so a stage's first backward measures the end-of-warm-up working set the
balancer and the recompute chooser charge.

How the measured counts relate to :func:`sappkit.in_flight` (tested in
``tests/pipeline/test_simulator.py``):

- ``1f1b``, ``dualpipev`` and one-chunk ``seqpipe``: each cell's peak equals
  ``in_flight``.
- ``interleaved`` (both variants) with ``m`` a multiple of ``p``: when the
  stage's steady state starts, each cell holds exactly ``in_flight`` and the
  stage holds their sum, which stays its peak. In the steady state the stage
  releases last-chunk activations while adding first-chunk ones, so a cell's
  own peak can exceed ``in_flight`` (up to ``min(2p, m)``); with unequal chunks
  this shift is the balancer's interleaved overhead, and for two chunks the
  measured peak equals static + Σ activation × in_flight + SAPP's overhead.
  When ``m mod p = r > 0`` the first group is ``p + r`` long and a stage holds
  ``(v - 1) r`` more micro-batches than ``in_flight`` sums to.
- ``seqpipe`` with chunks: a stage's total peak is the sum of ``in_flight``
  plus ``(v - 1)(g + m k mod g - p)`` with ``g = k ceil(p / k)``; SAPP's pipeline
  balancer spreads that total over the chunks differently from this order.
- ``gpipe``, ``looped_bfs``, ``zb_interleaved``, ``zbv``, ``dualpipev_split``, ``dualpipe``:
  each cell's peak equals ``in_flight`` (a unit counts until its weight pass
  ends), and a stage's peak is at most their sum.

For ``seqpipe`` the costs are per slice (a layer table rescaled by
:func:`sappkit.pipeline.seqpipe.rescale_for_seqpipe`, docs/design.md "SeqPipe") and the step
runs ``m k`` slices; a slice's backward follows the later slices' of its
micro-batch. ``dualpipev`` runs each backward as one block; ``dualpipev_split``
splits it as PyTorch's DualPipeV does, and runs each of its overlapped
forward-backward pairs as the forward then the backward (their compute adds up).

``dualpipe`` runs two model copies in opposite directions, each chunk one
copy's stage (:mod:`sappkit.pipeline.schedules`): a micro-batch runs through
its own copy's cells only, the first ``m / 2`` down chunk 0 from stage 0, the
others up chunk 1 from stage ``p - 1`` (the timeline numbers them
``m/2..m-1``); its backward split and its overlapped pairs as under
``dualpipev_split``. Each cell runs ``m / 2`` micro-batches, so a stage's
``time`` is its busy time per pair of micro-batches, one of each direction.
Each chunk's costs are the costs of the layers it holds, given per cell:
chunk 1 on stage ``s`` holds the layers chunk 0 holds on stage ``p - 1 - s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .._check import check_number
from ..columns import (
    ACTIVATION_MB, BACKWARD_INPUT_TIME, BACKWARD_TIME, BACKWARD_WEIGHT_TIME, CHUNK, CONST_MB, FORWARD_TIME, IN_FLIGHT,
    LIMIT_MB, MEMORY_MB, OVERHEAD_MB, PARAM_MB, RECOMPUTE_TIME, STAGE, TIME, WEIGHT_PASS_MB, WORKING_MB,
)
from ..layers.units import UNSTATED, check_time_unit, format_mb, format_share, format_time, time_unit_of, with_time_unit
from ..limits import MAX_MEMORY_MB, MAX_TIME
from .events import StepPlan, op_starts, plan_from_orders, step_plan
from .phases import BACKWARD, BACKWARD_INPUT, HOLDS
from .schedules import check_pipeline, check_simulated, directions, model_order
from .simulator_inputs import checked_costs, checked_orders, static_parts, static_per_stage

__all__ = ["Simulation", "simulate", "MICRO_BATCH", "SLICE", "PHASE", "START", "END",
           "BUSY_TIME", "IDLE_TIME", "PHASES"]

MICRO_BATCH = "micro_batch"
SLICE = "slice"
PHASE = "phase"
START = "start"
END = "end"
BUSY_TIME = "busy_time"
IDLE_TIME = "idle_time"
#: Phase names, indexed by the op phases of :mod:`sappkit.pipeline.orders`.
PHASES = ("forward", "backward", "backward_input", "backward_weight")


@dataclass(frozen=True, eq=False)
class Simulation:
    """One simulated training step.

    Attributes
    ----------
    schedule, micro_batches, chunks, seq_split, less_memory
        The pipeline that ran.
    step_time : float
        When the last op ends, in ``time_unit``.
    bubbles : Series
        ``real``, ``ideal``, ``imbalance``, ``recompute``: idle and recompute
        time as fractions of the compute without recompute (SAPP's bubble),
        ``real = ideal + imbalance + recompute``, none negative. ``ideal`` is
        the schedule's own: the bubble its step order leaves with every cell
        at the mean of each pass's cost, no transfer time and no recompute
        (``(p - 1) / m`` for 1F1B, ``(p - 1) / (v m)`` interleaved, less for
        the zero-bubble orders and the V shapes), capped at the real idle
        time when unequal cells fill the order better. ``imbalance`` is the
        rest of the idle time: unequal cells, ``p2p_time``. ``of_step``: the
        share of the step the devices sit idle (idle over ``p`` times the
        step time), the bubble as Megatron-LM and torchtitan users read it.
    timeline : DataFrame
        One row per op: ``stage``, ``chunk``, ``micro_batch``, ``slice``,
        ``phase`` (one of :data:`PHASES`), ``start``, ``end``, ``recompute_time``
        (the recompute at the start of a backward or input pass).
    memory : DataFrame
        ``stage``, ``time``, ``memory_mb``: each stage's memory from time 0 and
        after every change (a step function: hold each value until the next;
        of changes at one time only the result is listed, while the stage's
        peak counts every moment).
    stages : DataFrame
        The shared per-stage memory schema, measured at each stage's peak:
        ``param_mb`` (the costs' ``param_mb``), ``activation_mb`` (activations
        held then + ``memory_once_mb``), ``overhead_mb`` (0), ``working_mb``
        (the running backward's working set then), ``const_mb`` (the rest of
        the static memory), ``memory_mb`` (the peak), ``limit_mb``; plus
        ``busy_time`` and ``idle_time`` over the step, and ``time``, the
        stage time: its busy time per micro-batch (per slice under SeqPipe),
        the forward + backward (recompute included) of everything the stage
        holds, over its chunks, as a plan's and a recompute choice's
        ``time`` (docs/design.md "Time and the objectives").
    in_flight : DataFrame
        ``stage``, ``chunk``, ``in_flight``: the most units each cell held at
        once, in :func:`sappkit.in_flight`'s row order.
    time_unit : str
        The unit of every time here (the costs'), which the frames also carry
        in ``attrs["time_unit"]``.
    """

    schedule: str
    micro_batches: int
    chunks: int
    seq_split: int
    less_memory: bool
    step_time: float
    bubbles: pd.Series = field(repr=False)
    timeline: pd.DataFrame = field(repr=False)
    memory: pd.DataFrame = field(repr=False)
    stages: pd.DataFrame = field(repr=False)
    in_flight: pd.DataFrame = field(repr=False)
    time_unit: str = UNSTATED

    def describe(self) -> str:
        """A few lines: the pipeline, step time, bubble split and the highest stage peak (against the limit)."""
        b = self.bubbles
        peak = self.stages.loc[self.stages[MEMORY_MB].idxmax()]
        limit = peak[LIMIT_MB]
        against = "" if np.isnan(limit) else f" of {format_mb(limit)}" + ("" if peak[MEMORY_MB] <= limit else
                                                                           ", over the limit")
        return "\n".join([
            f"{self.schedule}: {len(self.stages)} stages, {self.chunks} chunk(s), "
            f"{self.micro_batches} micro-batches" + (f" x {self.seq_split} slices" if self.seq_split > 1 else ""),
            f"step time {format_time(self.step_time, self.time_unit)}",
            f"bubble {format_share(b['real'], of='the compute')} = ideal {format_share(b['ideal'])} + imbalance "
            f"{format_share(b['imbalance'])} + recompute {format_share(b['recompute'])}; idle {b['of_step']:.1%} of "
            "the step",
            f"peak memory {format_mb(peak[MEMORY_MB])} on stage {int(peak[STAGE])}{against}",
        ])


def _op_times(plan: StepPlan, durations: np.ndarray, p2p_time: float, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Every op's start and end (stage-major, run order), its cells' phase durations in model order."""
    start = np.array(op_starts(plan, durations.tolist(), p2p_time, p))
    return start, start + durations[plan.phase * plan.cell_count + plan.position]


def _ideal_bubble(plan: StepPlan, phases, compute: float, p: int) -> float:
    """The schedule's own bubble, as a share of ``compute``: its step order with every cell at the mean of each
    phase's cost (``phases``: forward, backward, input and weight passes, recompute taken out), no transfer time."""
    balanced = np.concatenate([np.full(len(times), float(np.mean(np.clip(times, 0.0, None)))) for times in phases])
    return p * float(_op_times(plan, balanced, 0.0, p)[1].max()) / compute - 1


def simulate(costs: pd.DataFrame, *, schedule: str = "1f1b", micro_batches: int, less_memory: bool = False,
             seq_split: int = 1, static_mb=None, p2p_time: float = 0.0, limit_mb: float | None = None,
             orders=None, time_unit: str | None = None) -> Simulation:
    """Simulate one training step of ``schedule`` over per-cell costs.

    Parameters
    ----------
    costs : DataFrame
        One row per cell (chunk, stage), every cell of a ``p`` x ``v`` grid:
        ``stage``, ``chunk``, ``forward_time``, ``backward_time`` (recompute
        included), ``activation_mb`` (per micro-batch in flight; per slice for
        ``seqpipe``); optional ``recompute_time`` (the part of the backward
        that is recompute; default 0), ``static_mb`` (summed per stage),
        ``param_mb`` and ``memory_once_mb`` (the parts of ``static_mb``
        reported under those names; :func:`sappkit.cell_costs` writes them all);
        for split backwards ``backward_input_time`` and ``backward_weight_time``
        (default: the weight pass takes half the backward beyond its recompute,
        ``(backward - recompute) / 2``, the input pass the rest) and
        ``weight_pass_mb`` (kept from the input pass until the weight pass
        ends; default ``activation_mb``).
    schedule : str
        One of :data:`sappkit.pipeline.schedules.SCHEDULES`.
    micro_batches : int
    less_memory : bool
        Less-memory interleaved order (``interleaved`` and ``seqpipe``).
    seq_split : int
        SeqPipe's slices per micro-batch ``k``; the costs are then per slice.
    static_mb : float, sequence or Series, optional
        Static memory per stage (one number for all, or ``p`` of them; a
        Series indexed by stage), instead of a ``static_mb`` column.
    p2p_time : float
        Added to every dependency between two stages.
    limit_mb : float, optional
        Device memory, copied into ``stages.limit_mb``.
    orders : sequence of sequences of (phase, chunk, unit), optional
        Each stage's ops to run instead of the schedule's own order, e.g.
        :func:`sappkit.torch.schedule_orders`; the schedule still fixes the
        cells' model order.
    time_unit : str, optional
        The unit of the costs' times (and of ``p2p_time``); default the
        costs' ``attrs["time_unit"]`` (:func:`sappkit.cell_costs` sets it from
        the layer table), else ``"time units"``.

    Returns
    -------
    Simulation

    Examples
    --------
    >>> costs = pd.DataFrame(dict(stage=[0, 1, 2, 3], chunk=0, forward_time=1.0,
    ...                           backward_time=2.0, activation_mb=10.0))
    >>> sim = simulate(costs, schedule="1f1b", micro_batches=8, static_mb=100)
    >>> sim.step_time, sim.stages["memory_mb"].tolist()
    (33.0, [140.0, 130.0, 120.0, 110.0])
    >>> print(simulate(costs, micro_batches=8, static_mb=100, time_unit="ms").describe())
    1f1b: 4 stages, 1 chunk(s), 8 micro-batches
    step time 33 ms
    bubble 37.5% of the compute = ideal 37.5% + imbalance 0.0% + recompute 0.0%; idle 27.3% of the step
    peak memory 140 MB on stage 0
    >>> sim.bubbles.round(4).to_dict()
    {'real': 0.375, 'ideal': 0.375, 'imbalance': 0.0, 'recompute': 0.0, 'of_step': 0.2727}
    """
    unit = time_unit_of(costs) if time_unit is None else check_time_unit(time_unit)
    cost, p, v = checked_costs(costs)
    schedule, p, m, v, k = check_pipeline(schedule, p, micro_batches, v, less_memory, seq_split)
    check_simulated(p, m, v, k)
    p2p_time = check_number("p2p_time", p2p_time, minimum=0, maximum=MAX_TIME)
    limit = np.nan if limit_mb is None else check_number("limit_mb", limit_mb, minimum=0, strict=True,
                                                         maximum=MAX_MEMORY_MB)
    static = static_per_stage(cost, static_mb, p)
    param, once, const = static_parts(cost, static)
    copies = directions(schedule)
    plan = step_plan(schedule, p, m, v, k, less_memory) if orders is None else plan_from_orders(
        checked_orders(orders, p, v), tuple(model_order(schedule, p, v)), m * k // copies, copies)

    # Cell values in model order: position i is plan.cells[i].
    in_model_order = [chunk * p + stage for chunk, stage in plan.cells]
    forward, backward, recompute, activation, kept_for_weights, input_pass, weight_pass = (
        cost[column][in_model_order] for column in (FORWARD_TIME, BACKWARD_TIME, RECOMPUTE_TIME, ACTIVATION_MB,
                                                    WEIGHT_PASS_MB, BACKWARD_INPUT_TIME, BACKWARD_WEIGHT_TIME))
    working = cost.get(WORKING_MB, np.zeros(p * v))[in_model_order]
    durations = np.concatenate([forward, backward, input_pass, weight_pass])

    start, end = _op_times(plan, durations, p2p_time, p)
    step_time = float(end.max())

    # Stages may run different numbers of ops (a whole backward on one, input and weight passes on another).
    bounds = np.cumsum([0] + [len(ops) for ops in plan.stage_ops])
    event_time, held, running = _memory_events(plan, start, end, activation, kept_for_weights, working, bounds)
    peak_at = [int(np.argmax(h + r)) for h, r in zip(held, running)]
    peak_activation = np.maximum([h[i] for h, i in zip(held, peak_at)], 0.0)
    peak_working = np.array([r[i] for r, i in zip(running, peak_at)])

    busy = np.add.reduceat(end - start, bounds[:-1])
    recompute_total = float(recompute.sum()) * plan.units
    compute = float(busy.sum()) - recompute_total
    real = p * step_time / compute - 1
    idle = real - recompute_total / compute
    ideal = min(_ideal_bubble(plan, (forward, backward - recompute, input_pass - recompute, weight_pass), compute, p),
                idle)  # unequal cells that the order fills better than equal ones leave no imbalance
    bubbles = pd.Series({"real": real, "ideal": ideal, "imbalance": idle - ideal, "recompute": recompute_total / compute,
                         "of_step": 1 - float(busy.sum()) / (p * step_time)})

    return Simulation(
        schedule=schedule, micro_batches=m, chunks=v, seq_split=k, less_memory=bool(less_memory),
        step_time=step_time, bubbles=bubbles,
        timeline=with_time_unit(_timeline(plan, start, end, recompute, k), unit),
        memory=with_time_unit(_memory(static, event_time, [h + r for h, r in zip(held, running)]), unit),
        stages=with_time_unit(_stage_frame(param, once, const, peak_activation, peak_working, limit, busy,
                                           step_time, plan.units), unit),
        in_flight=_in_flight(plan, v, p), time_unit=unit,
    )


def _timeline(plan: StepPlan, start, end, recompute, k: int) -> pd.DataFrame:
    cells = np.array(plan.cells)
    is_backward = (plan.phase == BACKWARD) | (plan.phase == BACKWARD_INPUT)
    return pd.DataFrame({
        STAGE: cells[plan.position, 1],
        CHUNK: cells[plan.position, 0],
        MICRO_BATCH: (plan.position // (plan.cell_count // plan.copies) * plan.units + plan.unit) // k,
        SLICE: plan.unit % k,
        PHASE: np.array(PHASES)[plan.phase],
        START: start,
        END: end,
        RECOMPUTE_TIME: np.where(is_backward, recompute[plan.position], 0.0),
    })


def _memory_events(plan: StepPlan, start, end, activation, kept_for_weights, working, bounds):
    """Per stage, in run order, each memory change's time and what is held after it: activations, working set.

    A forward adds its activation at its start. A backward (or its input
    pass) adds its cell's working set at its start and releases it at its
    end, with the activation (all of it, or all but what the weight pass
    keeps); the weight pass releases the rest at its end. A stage's ops run
    one after another, so the changes come in time order.
    """
    cell, phase = plan.position, plan.phase
    none = np.zeros_like(activation)
    at_start = np.stack([activation, none, none, none])[phase, cell]
    at_end = np.stack([none, -activation, kept_for_weights - activation, -kept_for_weights])[phase, cell]
    held_working = np.stack([none, working, working, none])[phase, cell]
    cut = 2 * bounds

    def per_stage(first, second):
        both = np.stack([first, second], axis=1).ravel()
        return [both[a:b] for a, b in zip(cut, cut[1:])]

    times = per_stage(start, end)
    held = [np.cumsum(x) for x in per_stage(at_start, at_end)]
    running = [np.cumsum(x) for x in per_stage(held_working, -held_working)]
    return times, held, running


def _memory(static: np.ndarray, event_time: list[np.ndarray], held: list[np.ndarray]) -> pd.DataFrame:
    """Each stage's memory from time 0 and after each change; of changes at one time, only the result, and
    only where it differs from the value before."""
    frames = []
    for s, (times, values) in enumerate(zip(event_time, held)):
        time = np.r_[0.0, times]
        value = static[s] + np.r_[0.0, values]
        last_at_time = np.r_[time[1:] != time[:-1], True]
        time, value = time[last_at_time], value[last_at_time]
        changed = np.r_[True, value[1:] != value[:-1]]
        frames.append(pd.DataFrame({STAGE: s, TIME: time[changed], MEMORY_MB: value[changed]}))
    return pd.concat(frames, ignore_index=True)


def _stage_frame(param, once, const, peak_activation, peak_working, limit, busy, step_time,
                 units: int) -> pd.DataFrame:
    p = len(param)
    return pd.DataFrame({
        STAGE: np.arange(p),
        PARAM_MB: param,
        ACTIVATION_MB: peak_activation + once,
        OVERHEAD_MB: 0.0,
        WORKING_MB: peak_working,
        CONST_MB: const,
        MEMORY_MB: param + once + const + peak_activation + peak_working,
        LIMIT_MB: limit,
        BUSY_TIME: busy,
        IDLE_TIME: step_time - busy,
        TIME: busy / units,
    })


def _in_flight(plan: StepPlan, v: int, p: int) -> pd.DataFrame:
    """Peak units held per cell: up at each forward, down at each backward or weight pass, in run order."""
    by_cell = np.argsort(plan.position, kind="stable")
    step = np.array(HOLDS)[plan.phase][by_cell]
    starts = np.cumsum(np.concatenate([[0], np.bincount(plan.position, minlength=plan.cell_count)[:-1]]))
    running = np.cumsum(step)
    running -= np.repeat(running[starts] - step[starts], np.diff(np.append(starts, len(step))))
    counts = np.maximum.reduceat(running, starts)
    peaks = np.zeros((v, p), dtype=int)
    for i, (chunk, stage) in enumerate(plan.cells):
        peaks[chunk, stage] = counts[i]
    return pd.DataFrame({STAGE: np.tile(np.arange(p), v), CHUNK: np.repeat(np.arange(v), p),
                         IN_FLIGHT: peaks.ravel()})
