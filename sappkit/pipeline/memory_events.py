"""A stage's memory events: the points of its step order where its memory may peak, from the order alone.

A stage runs its ops in a fixed order (:func:`sappkit.pipeline.orders.stage_orders`),
whatever the ops' times, and its memory changes only at its own ops (as the
simulator counts it, :mod:`sappkit.pipeline.simulator`): a forward adds its
cell's activation when it starts; a backward, or an input pass, holds its
cell's ``working_mb`` while it runs and, with the weight pass, releases the
activation when it ends. So at every point of the order a stage holds
``Σ_c k_c A_c + W`` above its static memory, ``k_c`` the units of chunk ``c``
forwarded and not yet released and ``W`` the working set of the cell whose
backward runs (none between ops). Its peak is the largest over the
*events*: each forward's start and each backward's (or input pass's)
start. An event is dominated when another holds at least as many units of
every chunk and the same cell's working set (or the event holds none), so
only the undominated ones are kept: the peak is the maximum of a few linear
functions of the cells' activations and working sets, for every choice of
them.

Units are micro-batches, or SeqPipe slices; a unit counts until its whole
backward (or its weight pass) ends, i.e. ``weight_pass_mb`` is taken as the
whole activation, the simulator's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .orders import stage_orders
from .phases import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD

__all__ = ["StageEvents", "memory_events", "NO_BACKWARD"]

#: ``running`` of an event between backwards (a forward's start): no working set held.
NO_BACKWARD = -1


@dataclass(frozen=True, eq=False)
class StageEvents:
    """One stage's undominated memory events.

    Attributes
    ----------
    held : ndarray
        ``[event, chunk]``: units of each chunk held at the event; events in
        the order the stage first reaches them.
    running : ndarray
        ``[event]``: the chunk whose backward (or input pass) runs then,
        holding that cell's working set; :data:`NO_BACKWARD` for none.
    """

    held: np.ndarray
    running: np.ndarray

    def peak(self, activation: np.ndarray, working: np.ndarray) -> np.ndarray:
        """Per event ``Σ_c held A_c + W``, for cells' ``activation[..., chunk]`` and ``working[..., chunk]``
        (any leading shape): ``[..., event]``."""
        activation, working = np.asarray(activation, dtype=float), np.asarray(working, dtype=float)
        charged = np.where(self.running >= 0, working[..., np.maximum(self.running, 0)], 0.0)
        return activation @ self.held.T + charged


def memory_events(schedule: str, stages: int, micro_batches: int, chunks: int = 1, less_memory: bool = False,
                  seq_split: int = 1) -> tuple[StageEvents, ...]:
    """Each stage's undominated memory events (module docstring) for a validated pipeline shape.

    Examples
    --------
    >>> events = memory_events("1f1b", 4, 8)
    >>> events[1].held.tolist(), events[1].running.tolist()
    ([[3.0]], [0])
    >>> last = memory_events("interleaved", 2, 4, chunks=2)[1]  # later, chunk 0's backward with 3 of its units
    >>> last.held.tolist(), last.running.tolist()
    ([[2.0, 1.0], [3.0, 0.0]], [1, 0])
    """
    return _memory_events(schedule, stages, micro_batches, chunks, bool(less_memory), seq_split)


@lru_cache(maxsize=64)
def _memory_events(schedule: str, p: int, m: int, v: int, less_memory: bool, k: int) -> tuple[StageEvents, ...]:
    return tuple(_stage_events(ops, v) for ops in stage_orders(schedule, p, m, v, less_memory, k))


def _stage_events(ops, v: int) -> StageEvents:
    """Walk one stage's order, recording each event, and keep the undominated ones."""
    held = np.zeros(v)
    rows, running = [], []
    for phase, chunk, _ in ops:
        if phase == FORWARD:
            held[chunk] += 1
            rows.append(held.copy())
            running.append(NO_BACKWARD)
        elif phase in (BACKWARD, BACKWARD_INPUT):
            rows.append(held.copy())
            running.append(chunk)
        if phase in (BACKWARD, BACKWARD_WEIGHT):
            held[chunk] -= 1
    return _undominated(np.array(rows).reshape(-1, v), np.array(running, dtype=int))


def _undominated(held: np.ndarray, running: np.ndarray) -> StageEvents:
    """Events no other covers: at least the units of every chunk, running the same cell's backward (any
    event covers one running none, working sets being >= 0); of equal events, the first; in run order."""
    keys, first = np.unique(np.column_stack([running, held]), axis=0, return_index=True)
    keys = keys[np.argsort(first)]  # in run order, so the first of equal peaks is the one the simulator reports
    running, held = keys[:, 0].astype(int), keys[:, 1:]
    covers = (held[:, None, :] >= held[None, :, :]).all(axis=2)      # covers[a, b]: a holds at least b's units
    same = (running[:, None] == running[None, :]) | (running[None, :] == NO_BACKWARD)
    beaten = covers & same
    np.fill_diagonal(beaten, False)
    keep = ~beaten.any(axis=0)
    held, running = held[keep], running[keep]
    held.flags.writeable = False
    running.flags.writeable = False
    return StageEvents(held=held, running=running)
