"""The search itself: shapes, bounds, the cheap pass as a branch and bound, the balanced pass, on any executor.

1. **Shapes** (the shared work): one layer table per shape, compiled on the
   workers and shipped back, then out again with each task of its strategies.
2. **Bounds**: every accepted strategy's memory and time bounds, the
   strategies of one pipeline together (its in-flight counts are counted
   once).
3. **The cheap pass as a branch and bound**: strategies in the order of their
   even-placement bound; each round prices the next :data:`ROUND` whose
   bound is below the threshold, the ``top``-th best cheap step found so far.
   A strategy whose bound reaches the threshold cannot be among the ``top``
   fastest even placements, so the search stops when none is left below it.
4. **The balanced pass** on those ``top`` (the most promising): the
   balancer's step objective with the per-layer recompute choice, on the
   plans of at most :data:`BALANCED_CHUNKS` chunks. A plan of more keeps its
   even placement (its cheap pass), as Megatron-LM places such a plan by
   default: the balancer's exact search grows steeply with a stage's chunks
   (a 70B-class plan of 4 stages and 10 chunks ran out of 24 GB).

Rounds have a fixed size and tasks a fixed grouping (by shape, the order of
the strategies), so what is priced, and every number, is the same on any
executor and any number of workers; only the wall time changes.
"""

from __future__ import annotations

import os
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...columns import SAPP_OPTIONS
from .shapes import SHAPE_DIMENSIONS, PricedShape
from .space import MICRO_BATCHES
from .tasks import BALANCED_CHUNKS, STRATEGY_FIELDS, Outcome, Setting, balanced_pass, bound, even_pass, price

__all__ = ["Found", "run_search", "ROUND", "TASK", "BOUND_CHUNK", "local_executor"]

#: Strategies priced per round of the cheap pass (fixed, so that the rounds are the same on every executor), and at
#: most per task (a round's tasks are many and small, so that every worker stays busy to the round's end).
ROUND, TASK = 48, 4
#: Strategies bounded per task (whole pipelines at a time).
BOUND_CHUNK = 16384


@dataclass(frozen=True)
class Found:
    """What the search found, per accepted strategy (in the order of the frame given to :func:`run_search`)."""

    shapes: dict[int, PricedShape]
    """Shape index -> its compiled table."""
    memory_bound_mb: np.ndarray
    time_bound_ms: np.ndarray
    even_bound_ms: np.ndarray
    """``[strategy, option]``."""
    cheap: dict[int, Outcome]
    """Row index -> the cheap pass's outcome, for the strategies it priced."""
    balanced: dict[int, Outcome]
    """Row index -> the balanced pass's outcome."""
    threshold_ms: float
    """The ``top``-th best cheap step: no strategy left unpriced can beat it under the even placement."""


def local_executor() -> Executor:
    """The default executor: a process pool over the machine's cores."""
    return ProcessPoolExecutor(max_workers=os.cpu_count() or 1)


def run_search(setting: Setting, accepted: pd.DataFrame, *, executor: Executor, top: int, progress,
               prune: bool = True) -> Found:
    """Run the search (module docstring) on the accepted strategies (a frame with the strategy columns,
    ``micro_batches`` and ``shape``, the index of its shape in ``shapes``); ``progress`` a tqdm-like bar.
    ``prune=False`` prices every accepted strategy in the cheap pass, bounds ignored: the exhaustive reference."""
    shapes = _price_shapes(setting, accepted, executor, progress)
    memory, time, even = _bound(setting, accepted, shapes, executor, progress)
    if prune:
        cheap, threshold = _cheap_pass(setting, accepted, shapes, memory, even, executor, top, progress)
    else:
        everything = np.zeros_like(even)  # no option ruled out, no early stop
        cheap, threshold = _cheap_pass(setting, accepted, shapes, np.zeros_like(memory), everything, executor,
                                       len(accepted) + 1, progress)
        steps = np.sort([o.step_ms for o in cheap.values() if np.isfinite(o.step_ms)])
        threshold = float(steps[top - 1]) if len(steps) >= top else np.inf
    best = sorted((outcome.step_ms, index) for index, outcome in cheap.items() if np.isfinite(outcome.step_ms))[:top]
    chosen = [index for _, index in best if accepted.at[index, "pipeline_parallel"] > 1
              and accepted.at[index, "virtual_stages"] <= BALANCED_CHUNKS]
    _phase(progress, "balanced pass", len(chosen))
    futures = [executor.submit(balanced_pass, setting, shapes[accepted.at[i, "shape"]], _row(accepted, i))
               for i in chosen]
    balanced = {}
    for future in futures:
        outcome = future.result()
        balanced[outcome.index] = outcome
        progress.update(1)
    return Found(shapes, memory, time, even, cheap, balanced, threshold)


def _price_shapes(setting: Setting, accepted: pd.DataFrame, executor: Executor, progress) -> dict[int, PricedShape]:
    keys = accepted.drop_duplicates("shape").sort_values("shape")
    _phase(progress, "layer tables", len(keys))
    futures = {int(k): executor.submit(price, setting, tuple(row)) for k, row in
               zip(keys["shape"], keys[list(SHAPE_DIMENSIONS)].itertuples(index=False))}
    shapes = {}
    for k, future in futures.items():
        shapes[k] = future.result()
        progress.update(1)
    return shapes


def _bound(setting: Setting, accepted: pd.DataFrame, shapes: dict[int, PricedShape], executor: Executor,
           progress) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _phase(progress, "bounds", len(accepted))
    costs = {k: (priced.shape, priced.costs, priced.compiled.layers.const_mb) for k, priced in shapes.items()}
    # the pipelines of one p and m side by side: their strategies share what a device holds of the parameters
    pipeline = ["pipeline_parallel", MICRO_BATCHES, "schedule", "virtual_stages"]
    order = accepted.sort_values(pipeline + ["shape"], kind="stable")
    sizes = order.groupby(pipeline, sort=False).size().to_numpy()
    chunks, start, taken = [], 0, 0
    for size in sizes:  # whole pipelines per task, about BOUND_CHUNK strategies each
        taken += size
        if taken >= BOUND_CHUNK:
            chunks.append(order.iloc[start:start + taken])
            start, taken = start + taken, 0
    if taken:
        chunks.append(order.iloc[start:])
    futures = [(chunk.index, executor.submit(bound, setting, {k: costs[k] for k in set(chunk["shape"])}, chunk))
               for chunk in chunks]
    position = pd.Series(np.arange(len(accepted)), index=accepted.index)
    memory, time = np.empty(len(accepted)), np.empty(len(accepted))
    even = np.empty((len(accepted), len(SAPP_OPTIONS)))
    for index, future in futures:
        found = future.result()
        at = position[index].to_numpy()
        memory[at], time[at], even[at] = found.memory_mb, found.time_ms, found.even_ms
        progress.update(len(index))
    return memory, time, even


def _cheap_pass(setting: Setting, accepted: pd.DataFrame, shapes: dict[int, PricedShape], memory: np.ndarray,
                even: np.ndarray, executor: Executor, top: int, progress) -> tuple[dict[int, Outcome], float]:
    """The branch and bound of the module docstring: the cheap pass's outcomes and the final threshold."""
    least = even.min(axis=1)
    candidates = np.flatnonzero((memory <= setting.memory_mb) & np.isfinite(least))
    _phase(progress, "cheap pass (at most)", len(candidates))
    candidates = candidates[np.lexsort((candidates, least[candidates]))]
    cheap: dict[int, Outcome] = {}
    threshold, next_up = np.inf, 0
    while next_up < len(candidates) and least[candidates[next_up]] < threshold:
        batch = candidates[next_up:next_up + ROUND]
        batch = batch[least[batch] < threshold]
        next_up += ROUND
        groups = pd.Series(batch).groupby(accepted["shape"].to_numpy()[batch], sort=True)
        futures = [executor.submit(even_pass, setting, shapes[k], [_row(accepted, accepted.index[i]) for i in rows],
                                   even[rows]) for k, group in groups
                   for rows in np.array_split(group.to_numpy(), -(-len(group) // TASK))]
        for future in futures:
            for outcome in future.result():
                cheap[outcome.index] = outcome
        progress.update(len(batch))
        steps = np.sort([o.step_ms for o in cheap.values() if np.isfinite(o.step_ms)])
        threshold = steps[top - 1] if len(steps) >= top else np.inf
    return cheap, float(threshold)


def _phase(progress, name: str, total: int) -> None:
    """Start the bar on a phase of ``total`` items (a tqdm bar, or anything with its ``reset`` and
    ``set_description``)."""
    progress.reset(total=total)
    progress.set_description(name)


def _row(frame: pd.DataFrame, index) -> tuple:
    return (index, *(frame.at[index, key] for key in STRATEGY_FIELDS))
