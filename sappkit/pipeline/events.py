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

from ..errors import InputError
from . import zero_bubble
from .orders import stage_orders
from .phases import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD
from .schedules import directions, model_order

__all__ = ["StepPlan", "step_plan", "plan_from_orders", "op_starts"]

#: What an op's end makes ready: a forward's output, a backward's input gradient, a weight gradient.
_OUTPUT, _GRADIENT, _WEIGHT = 0, 1, 2
_PRODUCES = {FORWARD: _OUTPUT, BACKWARD: _GRADIENT, BACKWARD_INPUT: _GRADIENT, BACKWARD_WEIGHT: _WEIGHT}


@dataclass(frozen=True, eq=False)
class StepPlan:
    """A pipeline shape's ops, encoded once for the event loop (cached per shape)."""

    cells: list            # (chunk, stage) in model order; a cell's position indexes it
    cell_count: int
    units: int             # each cell's units (a direction's, for DualPipe)
    copies: int            # model copies the cells split into, in equal runs (2 for DualPipe)
    stage_ops: tuple       # per stage: (own slot, dependency slot or -1, crosses stages, duration index,
    #                        the slot of the op before it when it passes that one's output on, or -1)
    phase: np.ndarray      # per op, stage-major in run order
    position: np.ndarray
    unit: np.ndarray


@lru_cache(maxsize=32)
def step_plan(schedule: str, p: int, m: int, v: int, k: int, less_memory: bool) -> StepPlan:
    """Encode a validated pipeline shape's own step order (:func:`sappkit.pipeline.orders.stage_orders`)."""
    copies = directions(schedule)
    paired = tuple(zero_bubble.dualpipe(p, m, s)[1] for s in range(p)) if schedule == "dualpipe" else None
    return plan_from_orders(stage_orders(schedule, p, m, v, less_memory, k), tuple(model_order(schedule, p, v)),
                            m * k // copies, copies, paired)


@lru_cache(maxsize=32)
def plan_from_orders(orders: tuple, cells: tuple, units: int, copies: int = 1, paired: tuple | None = None) -> StepPlan:
    """Encode per-stage orders: each op's slot, the slot its input comes from, and more.

    Slots index one flat list of end times, ``(kind L + position) units +
    unit`` for ``L`` cells and kinds output, gradient, weight. A forward's
    input is the forward of the cell before it in model order; a backward's
    or input pass's, the gradient of the cell after it (the last cell's, its
    own forward); a weight pass's, its own input pass. With ``copies`` model
    copies the cells split into that many equal runs, each its own model: a
    run's first cell takes its input from nowhere, its last cell's backward
    follows its own forward. ``paired`` holds per stage the positions of
    the ops that run overlapped with the op after them: such an op's output
    is ready when the op after it ends (both are passed on together). Raises
    :class:`~sappkit.InputError` when the orders do not run each cell's
    units exactly once (a forward, then a backward or an input pass and a
    weight pass).
    """
    cells = list(cells)
    position = {cell: i for i, cell in enumerate(cells)}
    run = len(cells) // copies
    stage_ops, flat = [], []
    scratch = 3 * len(cells) * units  # where a paired op's end goes: its output waits for the next op's
    for s, ops in enumerate(orders):
        encoded = []
        pairs, previous_slot = paired[s] if paired else frozenset(), -1
        for index, (phase, chunk, unit) in enumerate(ops):
            if unit >= units:
                raise InputError(f"orders run unit {unit} on stage {s}; the step has units 0..{units - 1}")
            i = position[(chunk, s)]
            if phase == FORWARD:
                source, source_kind = (i - 1 if i % run else -1), _OUTPUT
            elif phase == BACKWARD_WEIGHT:
                source, source_kind = i, _GRADIENT
            else:
                source, source_kind = (i + 1, _GRADIENT) if (i + 1) % run else (i, _OUTPUT)
            slot = (_PRODUCES[phase] * len(cells) + i) * units + unit
            dependency = -1 if source < 0 else (source_kind * len(cells) + source) * units + unit
            crosses = source >= 0 and cells[source][1] != s
            passes_on = previous_slot if index - 1 in pairs else -1
            encoded.append((scratch if index in pairs else slot, dependency, crosses, phase * len(cells) + i,
                            passes_on))
            previous_slot = slot
            flat.append((phase, i, unit))
        stage_ops.append(tuple(encoded))
    _check_complete(flat, cells, units)
    phase, pos, unit = (np.array(column) for column in zip(*flat))
    for array in (phase, pos, unit):
        array.flags.writeable = False
    return StepPlan(cells=cells, cell_count=len(cells), units=units, copies=copies, stage_ops=tuple(stage_ops),
                    phase=phase, position=pos, unit=unit)


def _check_complete(flat: list[tuple[int, int, int]], cells: list, units: int) -> None:
    """Every (cell, unit) runs one forward and one backward, or one input and one weight pass."""
    seen: dict[tuple[int, int], list[int]] = {}
    for phase, i, unit in flat:
        seen.setdefault((i, unit), []).append(phase)
    for i, cell in enumerate(cells):
        for unit in range(units):
            phases = sorted(seen.get((i, unit), []))
            if phases not in ([FORWARD, BACKWARD], [FORWARD, BACKWARD_INPUT, BACKWARD_WEIGHT]):
                raise InputError(f"orders run cell (chunk, stage) = {cell} unit {unit} as phases {phases}; "
                                 "each unit needs one forward (0) and one backward (1), or one input pass (2) "
                                 "and one weight pass (3)")


def op_starts(plan: StepPlan, durations: list[float], p2p_time: float, p: int) -> list[float]:
    """Start time of every op (stage-major, run order): each stage runs its next op once its input is ready.

    ``durations`` holds the cells' forward times in model order, then their
    backward, input-pass and weight-pass times. A sweep that runs nothing
    means the orders deadlock: an op waits for one its own or another
    stage's order puts after it.

    Examples
    --------
    >>> plan = step_plan("1f1b", 2, 2, 1, 1, False)
    >>> op_starts(plan, [1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0], 0.0, 2)  # stage 0: F F B B, stage 1: F B F B
    [0.0, 1.0, 4.0, 7.0, 1.0, 2.0, 4.0, 5.0]
    """
    ends = [None] * (3 * plan.cell_count * plan.units + 1)  # and the scratch slot of paired ops
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
                slot, dependency, crosses, cost, passes_on = ops[i]
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
                if passes_on >= 0:
                    ends[passes_on] = t
                i += 1
            ran += i - next_op[s]
            next_op[s], free[s] = i, t
        if not ran:
            waiting = {s: next_op[s] for s in range(p) if next_op[s] < len(plan.stage_ops[s])}
            raise InputError(f"the step orders deadlock: each stage's next op waits for an op that never runs "
                             f"first (stage: position of its next op in its order) {waiting}")
        remaining -= ran
        downward = not downward
    return starts
