"""The event loop: a step order encoded for fast lookups, and the start time of every op.

Each stage runs its ops in order; an op starts when its stage is free and its
input is ready (see :mod:`sappkit.pipeline.simulator` for the dependency rules). The
loop sweeps the stages alternately down and up — forwards flow down the
pipeline, backwards up — running each stage as far as its inputs allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .orders import BACKWARD, FORWARD, stage_orders
from .schedules import model_order

__all__ = ["StepPlan", "step_plan", "op_starts"]


@dataclass(frozen=True, eq=False)
class StepPlan:
    """A pipeline shape's ops, encoded once for the event loop (cached per shape)."""

    cells: list            # (chunk, stage) in model order; a cell's position indexes it
    cell_count: int
    units: int
    stage_ops: tuple       # per stage: (own slot, dependency slot or -1, crosses stages, duration index)
    phase: np.ndarray      # per op, stage-major in run order
    position: np.ndarray
    unit: np.ndarray


@lru_cache(maxsize=32)
def step_plan(schedule: str, p: int, m: int, v: int, k: int, less_memory: bool) -> StepPlan:
    """Encode a validated pipeline shape's step order: each op's slot, the slot its input comes from, and more.

    Slots index one flat list of op end times, ``(phase L + position) m k +
    unit`` for ``L`` cells; a forward's input is the forward of the cell before
    it in model order, a backward's the backward of the cell after it (the last
    cell's, its own forward).
    """
    cells = model_order(schedule, p, v)
    position = {cell: i for i, cell in enumerate(cells)}
    last, units = len(cells) - 1, m * k
    stage_ops, flat = [], []
    for s, ops in enumerate(stage_orders(schedule, p, m, v, less_memory, k)):
        encoded = []
        for phase, chunk, unit in ops:
            i = position[(chunk, s)]
            if phase == FORWARD:
                source = i - 1
            else:
                source = i + 1 if i < last else i
            source_phase = FORWARD if phase == FORWARD or i == last else BACKWARD
            slot = ((phase * len(cells) + i) * units + unit)
            dependency = -1 if source < 0 else (source_phase * len(cells) + source) * units + unit
            crosses = source >= 0 and cells[source][1] != s
            encoded.append((slot, dependency, crosses, phase * len(cells) + i))
            flat.append((phase, i, unit))
        stage_ops.append(tuple(encoded))
    phase, pos, unit = (np.array(column) for column in zip(*flat))
    for array in (phase, pos, unit):
        array.flags.writeable = False
    return StepPlan(cells=cells, cell_count=len(cells), units=units, stage_ops=tuple(stage_ops),
                    phase=phase, position=pos, unit=unit)


def op_starts(plan: StepPlan, durations: list[float], p2p_time: float, p: int) -> list[float]:
    """Start time of every op (stage-major, run order): each stage runs its next op once its input is ready.

    ``durations`` holds the forward times of the cells in model order, then
    their backward times. A sweep that runs nothing would mean the order
    deadlocks.

    Examples
    --------
    >>> plan = step_plan("1f1b", 2, 2, 1, 1, False)
    >>> op_starts(plan, [1.0, 1.0, 2.0, 2.0], 0.0, 2)  # stage 0: F F B B, stage 1: F B F B
    [0.0, 1.0, 4.0, 7.0, 1.0, 2.0, 4.0, 5.0]
    """
    ends = [None] * (2 * plan.cell_count * plan.units)
    offsets = np.cumsum([0] + [len(ops) for ops in plan.stage_ops]).tolist()
    starts = [0.0] * offsets[-1]
    next_op, free = [0] * p, [0.0] * p
    remaining, sweeps = offsets[-1], (range(p), range(p - 1, -1, -1))
    downward = True
    while remaining:
        ran = 0
        for s in sweeps[0 if downward else 1]:
            ops, i, t, base = plan.stage_ops[s], next_op[s], free[s], offsets[s]
            while i < len(ops):
                slot, dependency, crosses, cost = ops[i]
                if dependency >= 0:
                    ready = ends[dependency]
                    if ready is None:
                        break
                    if crosses:
                        ready += p2p_time
                    if ready > t:
                        t = ready
                starts[base + i] = t
                t += durations[cost]
                ends[slot] = t
                i += 1
            ran += i - next_op[s]
            next_op[s], free[s] = i, t
        if not ran:
            raise RuntimeError("the schedule's step order deadlocks; sappkit.pipeline.orders built an inconsistent order")
        remaining -= ran
        downward = not downward
    return starts
