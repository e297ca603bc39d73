"""A step's time and its breakdown per stage: the simulated pipeline, then what it cannot overlap.

The overlap model is :mod:`sappkit.strategy.evaluate`'s docstring. The
breakdown frame has one row per stage (:data:`STEP_COLUMNS`); its columns
add up to the step time: the stage's busy time split by what its layers
spend it on (``compute_ms`` with recompute, ``tp_comm_ms``, ``cp_comm_ms``,
``ep_comm_ms``, ``zero_comm_ms``: ZeRO 3's gathers and reduce-scatters beyond the compute they overlap;
per-layer breakdown times the micro-batches), then
``pp_comm_ms`` (with ``overlap_p2p_comm``, the transfers into the stage as far
as the stage waited for them: what the schedule overlaps with other work is
not charged; without it, the transfers the stage sends, which it spends
waiting), ``dp_comm_ms``
(the exposed gradient reduction, per bucket under the last backward with
``overlap_grad_reduce`` and the slowdown of the backward it hides under, and
the weight gather), ``optimizer_ms`` and
``idle_ms``, the rest: pipeline bubbles and waiting for the slowest stage.
``dp_overlapped_ms`` is the data-parallel time hidden behind the backward
(not part of the sum).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from ..balancer import balance, even_plan
from ..balancer.step import step_timer
from ..columns import ACTIVATION_MB, BODY, COUNT, KIND, OPTION, ROLE, STAGE, STAGE_MEMORY
from ..columns import CONST_MB, LIMIT_MB, MEMORY_MB, OVERHEAD_MB, PARAM_MB, WORKING_MB
from ..hardware import Cluster
from ..layers import LayerTable
from ..layers.comm import copies_sum_ms, grad_sync_parts, optimizer_ms
from ..layers.timing import COMPUTE_MS, CP_COMM_MS, EP_COMM_MS, EXPERT_PARAMS, PARAMS, TP_COMM_MS, ZERO_COMM_MS
from ..pipeline.critical import op_ends
from ..pipeline.events import step_plan
from ..pipeline.schedules import TWO_DIRECTIONS, directions
from ..pipeline.phases import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD
from .config import Strategy

__all__ = ["Priced", "price_pipeline", "price_plan", "price_single_stage", "bucket_count", "STEP_COLUMNS",
           "PP_COMM_MS", "DP_COMM_MS", "OPTIMIZER_MS", "IDLE_MS", "STEP_MS", "DP_OVERLAPPED_MS"]

PP_COMM_MS, DP_COMM_MS, OPTIMIZER_MS = "pp_comm_ms", "dp_comm_ms", "optimizer_ms"
IDLE_MS, STEP_MS, DP_OVERLAPPED_MS = "idle_ms", "step_ms", "dp_overlapped_ms"
_BUSY = (COMPUTE_MS, TP_COMM_MS, CP_COMM_MS, EP_COMM_MS, ZERO_COMM_MS)
#: The per-stage breakdown's columns after ``stage``, in the order they add up to ``step_ms``.
STEP_COLUMNS = (*_BUSY, PP_COMM_MS, DP_COMM_MS, OPTIMIZER_MS, IDLE_MS, STEP_MS, DP_OVERLAPPED_MS)


@dataclass(frozen=True)
class Priced:
    """A priced step: its time (ms), per-stage memory and breakdown, and the plan (None without a pipeline)."""

    step_time: float
    stages: pd.DataFrame
    breakdown: pd.DataFrame
    plan: object


def price_pipeline(layers: LayerTable, strategy: Strategy, cluster: Cluster, *, micro_batches: int, options,
                   placement: str, memory_mb: float, p2p_ms: float) -> Priced:
    """Place, simulate and finish one step of a pipeline (``p >= 2``)."""
    p, v, schedule = strategy.pipeline_parallel, strategy.virtual_stages, strategy.schedule
    if placement == "even":
        plan = even_plan(layers, option=options[0], stages=p, micro_batches=micro_batches, memory_mb=memory_mb,
                         chunks=v, schedule=schedule)
    else:
        plan = balance(layers, stages=p, micro_batches=micro_batches, memory_mb=memory_mb, chunks=v,
                       schedule=schedule, objective="step")
    return price_plan(plan, layers, strategy, cluster, p2p_ms=p2p_ms)


def price_plan(plan, layers: LayerTable, strategy: Strategy, cluster: Cluster, *, p2p_ms: float) -> Priced:
    """Simulate and finish one step of a pipeline whose layers ``plan`` has placed (a plan with a placement)."""
    p, micro_batches, parallel = strategy.pipeline_parallel, plan.setup.micro_batches, strategy.parallel
    setup = plan.setup
    timer = step_timer(setup)
    sending = _sending(setup)
    durations = timer.durations(plan.counts)
    if not strategy.overlap_p2p_comm:  # the sender waits for its transfer: it is part of the op
        durations = durations + sending * p2p_ms
    ends = op_ends(timer.graph, durations, p2p_ms if strategy.overlap_p2p_comm else 0.0)
    starts = ends - durations[timer.graph.duration]
    order = step_plan(setup.schedule, p, setup.micro_batches, setup.chunks, setup.seq_split, setup.less_memory)
    bounds = np.cumsum([0] + [len(ops) for ops in order.stage_ops])
    sums = _cell_sums(layers, setup, plan.counts)
    # Each model copy runs its own share of the micro-batches (half each under DualPipe).
    busy_parts = sums[..., :len(_BUSY)].sum(axis=0) * micro_batches / directions(setup.schedule)
    params = sums[..., len(_BUSY):]
    chunk_of_cell = np.array([chunk for chunk, _ in order.cells])
    rows, done = [], []
    for s in range(p):
        ops = slice(bounds[s], bounds[s + 1])
        chunk_of = chunk_of_cell[order.position[ops]]
        gradient = np.isin(order.phase[ops], (BACKWARD, BACKWARD_WEIGHT))
        ready = [_last_backward(starts[ops], ends[ops], gradient & (chunk_of == c)) for c in range(setup.chunks)]
        end = float(ends[ops].max())
        busy = float((ends[ops] - starts[ops]).sum())
        if strategy.overlap_p2p_comm:  # the transfers into the stage, as far as it waited for them
            transfers = min(float(timer.graph.crosses[ops].sum()) * p2p_ms, end - busy)
        else:  # the transfers out of the stage, spent on it
            transfers = float(sending[timer.graph.duration[ops]].sum()) * p2p_ms
            busy -= transfers
        syncs = [grad_sync_parts(*params[c, s], parallel, cluster, p) for c in range(setup.chunks)]
        tail = _tail(strategy, cluster, end, ready, syncs, tuple(params[:, s].sum(axis=0)),
                     [float(params[c, s].sum()) for c in range(setup.chunks)])
        if setup.schedule in TWO_DIRECTIONS:  # exposed: the partner's gradients come ready on its own clock
            tail[DP_COMM_MS] += copies_sum_ms(*params[:, s].sum(axis=0), parallel, cluster, p)
        done.append(end + tail[DP_COMM_MS] + tail[OPTIMIZER_MS])
        rows.append({STAGE: s, **dict(zip(_BUSY, busy_parts[s])), PP_COMM_MS: transfers, **tail, "_busy": busy})
    step = float(max(done))
    return Priced(step, plan.stages[list(STAGE_MEMORY)].copy(), _frame(rows, step), plan)


def price_single_stage(layers: LayerTable, strategy: Strategy, cluster: Cluster, *, micro_batches: int, option: str,
                       memory_mb: float) -> Priced:
    """One step without a pipeline: the device runs every layer for each micro-batch in turn."""
    frame = layers.frame
    rows = frame[(frame[ROLE] != BODY) | (frame[OPTION] == option)]
    forward, backward = (float((rows[column] * rows[COUNT]).sum()) for column in ("forward_time", "backward_time"))
    busy = micro_batches * (forward + backward)
    counts = rows[COUNT].to_numpy()
    parts = np.array([_breakdown_rows(layers)[item] for item in zip(rows[KIND], rows[OPTION])]) * counts[:, None]
    totals = parts.sum(axis=0)
    spent = {column: micro_batches * float(total) for column, total in zip(_BUSY, totals)}
    dense, experts = (float(total) for total in totals[len(_BUSY):])
    sync = grad_sync_parts(dense, experts, strategy.parallel, cluster)
    tail = _tail(strategy, cluster, busy, [(busy - backward, busy)], [sync], (dense, experts), [dense + experts])
    step = busy + tail[DP_COMM_MS] + tail[OPTIMIZER_MS]
    memory = {PARAM_MB: float((rows[PARAM_MB] * counts).sum()),
              ACTIVATION_MB: float((rows[ACTIVATION_MB] * counts).sum()), OVERHEAD_MB: 0.0,
              WORKING_MB: float(rows[WORKING_MB].max()), CONST_MB: layers.const_mb}
    stages = pd.DataFrame([{STAGE: 0, **memory, MEMORY_MB: sum(memory.values()), LIMIT_MB: memory_mb}])
    return Priced(step, stages, _frame([{STAGE: 0, **spent, PP_COMM_MS: 0.0, **tail, "_busy": busy}], step), None)


def _sending(setup) -> np.ndarray:
    """1 for each duration (``phase L + position``) whose op sends its result to another stage: a forward to the
    next cell in model order, a backward or input pass to the cell before; else 0."""
    cells, L = setup.cells, len(setup.cells)
    sending = np.zeros(4 * L)
    for i in range(L):
        if i + 1 < L and cells[i + 1][1] != cells[i][1]:
            sending[FORWARD * L + i] = 1.0
        if i > 0 and cells[i - 1][1] != cells[i][1]:
            sending[BACKWARD * L + i] = sending[BACKWARD_INPUT * L + i] = 1.0
    return sending


def _last_backward(starts: np.ndarray, ends: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """(start, end) of the last gradient op among ``mask``: the chunk's last micro-batch's backward."""
    last = int(np.flatnonzero(mask)[np.argmax(starts[mask])])
    return float(starts[last]), float(ends[last])


def bucket_count(params: float, parallel) -> int:
    """How many buckets Megatron-Core's distributed data parallelism reduces ``params`` gradients in: its default
    bucket of ``max(4·10⁷, 10⁶·dp·cp)`` parameters (``DistributedDataParallel``'s ``bucket_size``)."""
    bucket = max(4e7, 1e6 * parallel.data_parallel * parallel.context_parallel)
    return max(1, int(np.ceil(params / bucket)))


def _tail(strategy: Strategy, cluster: Cluster, end: float, ready: list[tuple[float, float]],
          syncs: list[tuple[float, float]], params: tuple[float, float], chunk_params: list[float]) -> dict:
    """The exposed data-parallel time and the optimizer step of a stage whose last op ends at ``end``.

    With ``overlap_grad_reduce`` each chunk's reduction runs per bucket (:func:`bucket_count`): bucket ``j`` of
    ``k`` is ready ``(j + 1)/k`` into the chunk's last backward (``ready``: its start and end), and the buckets
    reduce one after another; what runs past ``end`` is exposed (the last bucket at least), and what runs under
    the backward slows it by the SMs it takes (``comm_sm_share``), added to the exposed time."""
    reduce, parallel = [r for r, _ in syncs], strategy.parallel
    if strategy.overlap_grad_reduce:
        buckets = []
        for (start, stop), time, count in zip(ready, reduce, chunk_params):
            k = bucket_count(count, parallel)
            buckets += [(start + (j + 1) / k * (stop - start), time / k) for j in range(k)]
        free = 0.0
        for start, time in sorted(buckets):
            free = max(free, start) + time
        exposed = max(0.0, free - end)
        exposed += cluster.device.comm_sm_share * (sum(reduce) - exposed)
    else:
        exposed = sum(reduce)
    gather = sum(g for _, g in syncs)
    exposed += 0.0 if strategy.overlap_param_gather else gather
    hidden = max(0.0, sum(reduce) + gather - exposed)
    return {DP_COMM_MS: exposed, OPTIMIZER_MS: optimizer_ms(*params, parallel, cluster),
            DP_OVERLAPPED_MS: hidden}


def _frame(rows: list[dict], step: float) -> pd.DataFrame:
    columns = {key: np.array([row[key] for row in rows]) for key in rows[0]}
    busy = columns.pop("_busy")
    exposed = columns[PP_COMM_MS] + columns[DP_COMM_MS] + columns[OPTIMIZER_MS]
    columns[STEP_MS] = np.full(len(rows), step)
    columns[IDLE_MS] = np.maximum(step - busy - exposed, 0.0)  # rounding aside, the wait for the slowest stage
    return pd.DataFrame({key: columns[key] for key in (STAGE, *STEP_COLUMNS)})


@lru_cache(maxsize=256)
def _breakdown_rows(layers: LayerTable) -> dict:
    """(kind, option) -> its per-micro-batch busy parts and parameters (:data:`_BUSY`, params, expert params),
    read once per table (the compiled shapes keep their tables, so a search reads each once)."""
    frame = layers.breakdown
    values = frame.reindex(columns=[*_BUSY, PARAMS, EXPERT_PARAMS], fill_value=0.0).to_numpy()
    return {(kind, option): row for kind, option, row in zip(frame[KIND], frame[OPTION], values)}


def _cell_sums(layers: LayerTable, setup, counts: np.ndarray) -> np.ndarray:
    """``[chunk, stage, column]``: the summed per-micro-batch breakdown (:data:`_BUSY`) and parameters
    (``params``, ``expert_params``) of each cell's body layers, its head and its tail."""
    rows = _breakdown_rows(layers)
    per_item = np.array([rows[item] for item in setup.items])
    sums = np.einsum("ics,ik->csk", counts, per_item)
    for fixed in setup.fixed:
        sums[fixed.chunk, fixed.stage] += rows[(fixed.kind, layers.options(fixed.kind)[0])]
    return sums
