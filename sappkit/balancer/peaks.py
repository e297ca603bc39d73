"""The balancer's stage memory with the working set: the peak over the stage's memory events.

With ``working_set=True`` (the default) a stage holds, above its parameters,
memory kept once and constant, ``max_e Σ_c k_{e,c} A_c + W_e`` over its
undominated memory events (:mod:`sappkit.pipeline.memory_events`): ``A_c``
the activation per micro-batch of its cell on chunk ``c`` (head and tail
included where they sit), ``k_{e,c}`` the units of that chunk held at event
``e`` and ``W_e`` the working set of the cell whose backward runs then —
the working set of the layer its backward reaches first, the cell's last
(:meth:`~sappkit.LayerTable.working_set_mb`): the tail where the cell ends
with it, else its last body layer in :attr:`BalanceSetup.cell_order`, 0 for
a cell with neither. This is what :func:`sappkit.simulate` measures on the
plan, and a maximum of linear functions, monotone in every activation and
working set, so the exact search's fronts and the integer program's
constraints (one per event) stay exact. For one chunk it is the 1F1B rule:
``in_flight × A`` plus the working set of the layer ending warm-up.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..pipeline.memory_events import StageEvents, memory_events
from .setup import BalanceSetup

__all__ = ["stage_events", "event_table", "fixed_activation", "cell_working"]


def stage_events(setup: BalanceSetup, s: int) -> StageEvents:
    """Stage ``s``'s undominated memory events under ``setup``'s pipeline."""
    return memory_events(setup.schedule, setup.stages, setup.micro_batches, setup.chunks, setup.less_memory,
                         setup.seq_split)[s]


def event_table(setup: BalanceSetup) -> tuple[np.ndarray, np.ndarray]:
    """Every stage's events in one table: held ``[stage, event, chunk]`` and which cell's working set each
    holds, one-hot ``[stage, event, chunk]``; stages with fewer events padded with repeats of their first (so a
    maximum over events, and its first place, are unchanged)."""
    return _event_table(setup.schedule, setup.stages, setup.micro_batches, setup.chunks, setup.less_memory,
                        setup.seq_split)


@lru_cache(maxsize=32)
def _event_table(*shape) -> tuple[np.ndarray, np.ndarray]:
    events = memory_events(*shape)
    width = max(len(e.running) for e in events)
    pad = [np.r_[np.arange(len(e.running)), np.zeros(width - len(e.running), dtype=int)] for e in events]
    held = np.stack([e.held[index] for e, index in zip(events, pad)])
    running = np.stack([e.running[index] for e, index in zip(events, pad)])
    charged = (running[..., None] == np.arange(held.shape[-1])).astype(float)
    for array in (held, charged):
        array.flags.writeable = False
    return held, charged


def fixed_activation(setup: BalanceSetup) -> np.ndarray:
    """``[chunk, stage]``: head and tail activation per micro-batch on their cells (read-only:
    :attr:`BalanceSetup.fixed_cell_activation`)."""
    return setup.fixed_cell_activation


def cell_working(setup: BalanceSetup, contents: np.ndarray, stages: np.ndarray) -> np.ndarray:
    """``[..., chunk]``: the working set each cell's backward holds, for stages ``stages`` holding ``contents``
    (that shape + ``[item, chunk]`` layers)."""
    order = setup.cell_order
    present = np.moveaxis(np.asarray(contents)[..., order, :] > 0, -1, -2)    # [..., chunk, position]
    last = len(order) - 1 - np.argmax(present[..., ::-1], axis=-1)
    working = np.where(present.any(axis=-1), setup.working[order][last], 0.0)
    tail = setup.tail
    if tail is not None:
        on_tail = np.asarray(stages)[..., None] == tail.stage
        working[..., tail.chunk] = np.where(on_tail[..., 0], tail.working_mb, working[..., tail.chunk])
    return working
