"""Per-stage memory the recompute choice does not change: the fixed parts of :mod:`sappkit.recompute.pricing`'s peaks.

Also the stage time the choice does not change: the head's and the tail's
forward + backward on their stages (``fixed_time``), which every stage's
``time`` includes (docs/design.md "Time and the objectives").

``F1`` (warm-up peak, one chunk): body and head/tail parameters, head/tail
activations at their cells' in-flight counts, the tail's working set on the
stage it ends and the constant (with more chunks the warm-up peak is the
events' of :mod:`sappkit.recompute.events`, and ``F1`` only a part of it).
``F2`` (second FSDP peak): parameters, head/tail activations times
``(n - 1)/n``, head/tail ``grad_mb``, the interleaved steady overhead (SAPP's
memory estimator's, at the configured options; ``overhead_mb``) and the constant.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..columns import (
    ACTIVATION_MB, BACKWARD_TIME, CHUNK, CONST_MB, FORWARD_TIME, GRAD_MB, KIND, LIMIT_MB, MEMORY_ONCE_MB, OVERHEAD_MB,
    PARAM_MB, STAGE, WORKING_MB,
)
from .layer_prices import LayerPrices
from .partition import Partition

__all__ = ["fixed_memory", "steady_overhead", "FIXED_MB", "BACKWARD_FIXED_MB", "BUDGET_MB", "BACKWARD_BUDGET_MB",
           "FIXED_TIME"]

FIXED_MB = "fixed_mb"
FIXED_TIME = "fixed_time"
BACKWARD_FIXED_MB = "backward_fixed_mb"
BUDGET_MB = "budget_mb"
BACKWARD_BUDGET_MB = "backward_budget_mb"


def fixed_memory(prices: LayerPrices, partition: Partition, body: pd.DataFrame, configured_mb: np.ndarray, *,
                 memory_mb: float, fsdp_holds_grads: bool) -> pd.DataFrame:
    """Per stage what the choice does not change (``F1``, ``F2``, the head's and tail's time) and the budgets it
    leaves.

    ``body`` is the partition's per-layer frame and ``configured_mb`` each
    layer's activation per micro-batch under its configured option (the
    interleaved overhead is held at those).
    """
    p, v = partition.stages, partition.chunks
    counts = partition.in_flight_counts
    param = np.bincount(body[STAGE], [prices.param_mb[kind] for kind in body[KIND]], p)
    activation, working, grads, shared, time = np.zeros(p), np.zeros(p), np.zeros(p), np.zeros(p), np.zeros(p)
    per_batch = np.zeros((v, p))
    np.add.at(per_batch, (body[CHUNK].to_numpy(), body[STAGE].to_numpy()), configured_mb)
    tail = prices.tail
    for row, (chunk, stage) in ((prices.head, (0, 0)), (tail, (v - 1, p - 1))):
        if row is None:
            continue
        n = counts[chunk, stage]
        kept = row[ACTIVATION_MB] * n + row[MEMORY_ONCE_MB]
        param[stage] += row[PARAM_MB]
        activation[stage] += kept
        shared[stage] += kept * (n - 1) / n
        grads[stage] += row[GRAD_MB]
        time[stage] += row[FORWARD_TIME] + row[BACKWARD_TIME]
        per_batch[chunk, stage] += row[ACTIVATION_MB]
        if row is tail:
            working[stage] += row[ACTIVATION_MB] + row[MEMORY_ONCE_MB] + row[WORKING_MB]
    overhead = steady_overhead(per_batch, partition)
    const = np.full(p, prices.const_mb)
    fixed = param + activation + working + const
    backward = param + shared + grads + overhead + const if fsdp_holds_grads else np.full(p, np.nan)
    return pd.DataFrame({STAGE: np.arange(p), PARAM_MB: param, ACTIVATION_MB: activation, OVERHEAD_MB: overhead,
                         WORKING_MB: working, CONST_MB: const, FIXED_MB: fixed, BACKWARD_FIXED_MB: backward,
                         LIMIT_MB: memory_mb, BUDGET_MB: memory_mb - fixed, BACKWARD_BUDGET_MB: memory_mb - backward,
                         FIXED_TIME: time})


def steady_overhead(per_batch: np.ndarray, partition: Partition) -> np.ndarray:
    """SAPP's memory estimator's steady overhead of unequal chunks per stage, from each cell's activation per
    micro-batch (``per_batch[chunk, stage]``); 0 for one chunk."""
    v, p = per_batch.shape
    overhead = np.zeros(p)
    if v == 1:
        return overhead
    left = partition.micro_batches - p
    if partition.less_memory:
        top = [(v - 1 - i, i) for i in range(v // 2)]
    else:
        top = [(v - 1 - i, i + 1) for i in range((v - 1) // 2)] + [(v - 1 - i, i) for i in range(v // 2)]
    bottom = [(v - 2 - i, i) for i in range((v - 1) // 2)]
    for s in range(p):
        terms = [(left - s) * abs(per_batch[a, s] - per_batch[b, s]) for a, b in top]
        terms += [s * abs(per_batch[a, s] - per_batch[b, s]) for a, b in bottom]
        overhead[s] = max([0.0, *terms])
    return overhead
