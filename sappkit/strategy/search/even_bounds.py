r"""Lower bounds on the cheap pass: the even placement's step under each recompute option, and its memory.

The cheap pass (:mod:`~.tasks`) places the body layers evenly over the
cells (:func:`sappkit.pipeline.costs.even_counts`, what Megatron-LM does by
default), every layer on one option, and keeps the fastest option that fits.
With the cells' contents known, the bounds of :mod:`~.bounds` tighten to
their values on that placement, per option :math:`o`:

- **memory**: stage :math:`s` holds its layers' parameters and what they keep
  once, the table's constant, and the activations of its cells at one memory
  event: :math:`\sum_c n_{c,s} A_{c,s}` for the schedules in
  :data:`~.bounds.SIMULTANEOUS`, else the largest single cell's
  :math:`\max_c n_{c,s} A_{c,s}`. The working set is left out;
- **time**: the largest of the stage paths (the first micro-batch's forward
  through the chunk-0 cells before the stage, the stage's work on every
  micro-batch, and for :data:`~.bounds.DRAINED` schedules the last
  micro-batch's gradient back down; a pipeline transfer at each boundary
  crossed) and one micro-batch's round trip through every cell.

An option whose memory bound exceeds the device cannot fit; the least time
bound over the others bounds the cheap pass's step from below. The cheap
pass then prices options in the order of their bounds and stops at the first
bound no faster than the best step it has found.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ...pipeline.costs import even_counts
from ...pipeline.schedules import V_SHAPED, model_order
from .bounds import DRAINED, SIMULTANEOUS, PerStrategy, flight_counts, gradient_time

__all__ = ["even_bounds"]


@lru_cache(maxsize=1024)
def _layout(schedule: str, p: int, v: int, counts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The even placement: per cell in model order its stage, its chunk, and its layers of each kind
    ``[cell, kind]`` (kinds follow model order, so a cell may hold the end of one and the start of the next)."""
    cells = model_order(schedule, p, v)
    per_cell = even_counts(sum(counts), schedule=schedule, stages=p, chunks=v)
    ends = np.cumsum(per_cell)
    starts = ends - per_cell
    kind_ends = np.cumsum(counts)
    kind_starts = kind_ends - np.array(counts)
    share = np.clip(np.minimum(ends[:, None], kind_ends[None]) - np.maximum(starts[:, None], kind_starts[None]),
                    0, None)
    return np.array([s for _, s in cells]), np.array([c for c, _ in cells]), share.astype(float)


def even_bounds(schedule: str, p: int, v: int, m: int, values: PerStrategy, memory_mb: float) -> np.ndarray:
    """``[strategy, option]``: a lower bound on the even placement's step time (ms) under each option, ``inf``
    where the option's memory bound exceeds ``memory_mb`` (module docstring)."""
    head, tail = values.head, values.tail
    if p == 1:
        time = m * (((values.forward + values.backward) * values.counts[:, None]).sum(axis=1)
                    + (head[:, :2].sum(axis=1) + tail[:, :2].sum(axis=1))[:, None])
        kept = (values.params[..., None] + values.once + values.activation) * values.counts[:, None]
        fixed = values.const_mb + values.head_mb + values.tail_mb + head[:, 2] + tail[:, 2]
        return np.where(fixed[:, None] + kept.sum(axis=1) <= memory_mb, time, np.inf)
    stage_of, chunk_of, share = _layout(schedule, p, v, tuple(int(c) for c in values.counts))
    forward, backward, gradient, activation = (share @ array for array in (  # [strategy, cell, option]
        values.forward, values.backward, gradient_time(schedule, values.backward), values.activation))
    for end, cell in ((head, 0), (tail, len(stage_of) - 1)):                    # [strategy, cell, option]
        forward[:, cell] += end[:, 0, None]
        backward[:, cell] += end[:, 1, None]
        gradient[:, cell] += gradient_time(schedule, end[:, 1, None])
        activation[:, cell] += end[:, 2, None]
    time = _time(schedule, p, v, m, forward, backward, gradient, stage_of, values.p2p_ms)
    memory = _memory(schedule, p, v, m, values, share, activation, stage_of, chunk_of)
    return np.where(memory <= memory_mb, time, np.inf)


def _per_stage(values: np.ndarray, stage_of: np.ndarray, p: int, how=np.add) -> np.ndarray:
    """``[strategy, stage, ...]``: ``values`` ``[strategy, cell, ...]`` summed (or maxed) over each stage's cells."""
    out = np.zeros((values.shape[0], p, *values.shape[2:]))
    for cell, stage in enumerate(stage_of):
        out[:, stage] = how(out[:, stage], values[:, cell])
    return out


def _time(schedule: str, p: int, v: int, m: int, forward, backward, gradient, stage_of, p2p) -> np.ndarray:
    """``[strategy, option]``: the largest stage path and the round trip."""
    busy = _per_stage(m * (forward + backward), stage_of, p)                             # [strategy, stage, option]
    start = np.zeros_like(forward[:, :1])
    # chunk 0 runs the stages in order in every schedule, so the cells before (0, s) are the first s
    before_forward = np.concatenate([start, np.cumsum(forward, axis=1)], axis=1)[:, :p]
    before_gradient = np.concatenate([start, np.cumsum(gradient, axis=1)], axis=1)[:, :p]
    drained = schedule in DRAINED
    crossed = (2 if drained else 1) * np.arange(p)[None, :] * p2p[:, None]              # [strategy, stage]
    paths = busy + before_forward + (before_gradient if drained else 0.0) + crossed[..., None]
    crossings = 2 * (p - 1) if schedule in V_SHAPED else p * v - 1
    trip = (forward + gradient).sum(axis=1) + 2 * crossings * p2p[:, None]
    return np.maximum(paths.max(axis=1), trip)


def _memory(schedule: str, p: int, v: int, m: int, values: PerStrategy, share, activation, stage_of,
            chunk_of) -> np.ndarray:
    """``[strategy, option]``: the highest stage's memory bound."""
    flight = flight_counts(schedule, p, v, m)[chunk_of, stage_of]                           # [cell]
    held = _per_stage(flight[None, :, None] * activation, stage_of, p,
                      np.add if schedule in SIMULTANEOUS else np.maximum)                # [strategy, stage, option]
    layers = np.zeros((p, len(values.counts)))
    np.add.at(layers, stage_of, share)                                                        # [stage, kind]
    kept = layers @ (values.params[..., None] + values.once)                                # [strategy, stage, option]
    fixed = np.repeat(values.const_mb[:, None], p, axis=1)
    fixed[:, 0] += values.head_mb
    fixed[:, stage_of[-1]] += values.tail_mb
    return (kept + fixed[..., None] + held).max(axis=1)
