"""A stage's memory as the exact searches price it: the relaxed and exact memory of cell contents, what the
stage holds whatever its body layers and the least each cell adds, which cells charge a working set, and
which chunks' memory never falls as they hold more.

With the working set, memory is the peak over the stage's memory events
(:mod:`sappkit.balancer.peaks`); without it, SAPP's pipeline balancer's in-flight counts
plus its interleaved overhead.
"""

from __future__ import annotations

import numpy as np

from ..evaluate import OVERHEAD_TOLERANCE, ceiling
from ..peaks import fixed_activation, stage_events
from ..setup import BalanceSetup

__all__ = ["activation_room", "charged_chunks", "fixed_memory", "floor_weights", "memory_bounds", "monotone_chunks"]


def memory_bounds(setup: BalanceSetup, s: int, layers, activation, working,
                  overhead: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Relaxed and exact stage memory of every combo (``overhead=False``: both without the overhead).

    With the working set both are the peak over the stage's memory events
    (:mod:`sappkit.balancer.peaks`), ``working`` each cell's charged working set.
    """
    kept = layers.sum(axis=1) * (setup.param[0] + setup.once[0])
    activation = np.asarray(activation, dtype=float)
    values, _ = _pieces(setup, s, activation, working, overhead)
    relaxed = kept + values.max(axis=1, initial=-np.inf)
    if setup.working_set or values.shape[1] == 1:
        return relaxed, relaxed
    expr = activation @ setup.overhead_weights(s)
    return relaxed, kept + values[:, 0] + np.maximum(np.ceil(expr - OVERHEAD_TOLERANCE), 0.0)


def activation_room(setup: BalanceSetup, s: int, kept: np.ndarray, activation: np.ndarray, working: np.ndarray,
                    chunk: int) -> np.ndarray:
    """Per row, the most activation the cell on ``chunk`` may hold with the stage's relaxed memory within the
    limit, the other cells holding ``activation`` (its own entry ignored), every cell charging ``working`` and
    the stage keeping ``kept`` MB of parameters and memory kept once: :func:`memory_bounds` inverted in that
    cell (-inf where even none is over the limit, inf where any fits).

    Relaxed memory is the largest of a few linear functions of the cells' activations, each rising (or flat)
    in every cell the search takes (:func:`monotone_chunks`), so the room is the least over them."""
    activation = np.array(activation, dtype=float)
    activation[:, chunk] = 0.0
    values, slopes = _pieces(setup, s, activation, working)
    values = values + kept[:, None]
    limit = ceiling(setup.memory_mb)
    slope = slopes[chunk]
    rising = slope > 0
    room = np.where(rising, (limit - values) / np.where(rising, slope, 1.0),
                    np.where(values <= limit, np.inf, -np.inf))
    return room.min(axis=1, initial=np.inf)


def _pieces(setup: BalanceSetup, s: int, activation: np.ndarray, working,
            overhead: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The linear functions whose largest is stage ``s``'s relaxed memory beside its body layers' parameters and
    memory kept once: their values per row ``[row, piece]`` and their slopes in each cell's activation
    ``[chunk, piece]`` (memory events with the working set; in-flight counts, then with the overhead,
    without)."""
    if setup.working_set:
        events = stage_events(setup, s)
        cells = activation + fixed_activation(setup)[:, s]
        working = np.array(working, dtype=float)
        tail = setup.tail
        if tail is not None and tail.stage == s:
            working[:, tail.chunk] = tail.working_mb
        return _base_memory(setup, s) + events.peak(cells, working), events.held.T
    memory = fixed_memory(setup, s) + activation @ setup.in_flight[:, s] + np.asarray(working).sum(axis=1)
    flights = setup.in_flight[:, s][:, None]
    if not overhead or not setup.overhead_active or not setup.overhead_terms(s):
        return memory[:, None], flights
    weights = setup.overhead_weights(s)
    return (np.column_stack([memory, memory + activation @ weights]),
            np.column_stack([flights[:, 0], flights[:, 0] + weights]))


def fixed_memory(setup: BalanceSetup, s: int) -> float:
    """What stage ``s`` holds whatever its body layers: constant, head and tail (and the tail's working set
    where it ends the warm-up).

    With the working set: constant, head and tail parameters and memory kept
    once, and the head's and tail's part of one memory event, the one whose
    least count over the chunks is largest (ties: the most head and tail
    memory) — at least the in-flight counts' least on every shape, so a stage
    of ``n`` body layers holds at least this plus ``n`` layers at that count.
    For one chunk, as without events: the head's and tail's activation ×
    in-flight and the tail's working set where it ends the warm-up.
    """
    if not setup.working_set:
        return setup.const_mb + sum(f.param_mb + f.activation_mb * setup.in_flight[f.chunk, f.stage]
                                    + f.memory_once_mb for f in setup.fixed if f.stage == s)
    held, reference = _fixed_held(setup, s)
    return _base_memory(setup, s) + float(held[reference])


def floor_weights(setup: BalanceSetup, s: int) -> tuple[np.ndarray, np.ndarray]:
    """Per chunk of stage ``s``: the count its cell's activation and the weight (0 or 1) its charged working
    set add to :func:`fixed_memory` in a lower bound of the stage's memory, cell by cell (the in-flight
    counts and 1 without the working set; with it, the counts of :func:`fixed_memory`'s event and 1 for the
    cell whose backward runs then)."""
    if not setup.working_set:
        return setup.in_flight[:, s], np.ones(setup.chunks)
    _, reference = _fixed_held(setup, s)
    events = stage_events(setup, s)
    return events.held[reference], (np.arange(setup.chunks) == events.running[reference]).astype(float)


def _fixed_held(setup: BalanceSetup, s: int) -> tuple[np.ndarray, int]:
    """Head's and tail's part of each memory event of stage ``s``, and the event :func:`fixed_memory` uses."""
    events = stage_events(setup, s)
    working = np.zeros(setup.chunks)
    tail = setup.tail
    if tail is not None and tail.stage == s:
        working[tail.chunk] = tail.working_mb
    held = events.peak(fixed_activation(setup)[:, s], working)
    return held, int(np.lexsort((held, events.held.min(axis=1)))[-1])


def _base_memory(setup: BalanceSetup, s: int) -> float:
    """Constant and head and tail parameters and memory kept once on stage ``s``."""
    return setup.const_mb + sum(f.param_mb + f.memory_once_mb for f in setup.fixed if f.stage == s)


def charged_chunks(setup: BalanceSetup, s: int) -> set[int]:
    """Chunks of stage ``s`` whose body layers' working set the stage's memory may charge: those whose backward
    runs at a memory event, but the tail's cell (its working set is the tail's)."""
    if not setup.working_set:
        return set()
    tail = setup.tail
    return {int(c) for c in stage_events(setup, s).running
            if c >= 0 and not (tail is not None and (tail.chunk, tail.stage) == (c, s))}


def monotone_chunks(setup: BalanceSetup, s: int) -> np.ndarray:
    """Per chunk: stage memory never falls as the chunk's activation grows.

    Without the working set, relaxed memory is ``Σ_c if_c A_c + max(0, Σ_c
    d_c A_c)``; a chunk whose ``if_c + d_c`` is negative (DualPipeV's second
    chunk under SAPP's overhead) can lower it by holding more. With it,
    the peak over memory events is monotone in every cell.
    """
    if setup.working_set:
        return np.ones(setup.chunks, dtype=bool)
    weights = setup.overhead_weights(s) if setup.overhead_active else 0.0
    return setup.in_flight[:, s] + np.minimum(weights, 0.0) >= 0
