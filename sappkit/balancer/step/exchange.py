"""Stage exchanges: two stages trade their layers, then recompute changes until every stage fits.

With many micro-batches the step is the busiest stages' steady state plus
the fill before it and the drain after it, so *where* the busiest stages sit
matters: the same stage contents in another order can be faster. Moving a
busy stage's layers one change at a time passes through slower placements,
so the local search (:mod:`sappkit.balancer.step.local_search`) cannot reach that
order; an exchange of two stages' whole contents does it in one step.

Earlier stages hold more micro-batches in flight, so a stage's layers may
not fit where they land. :func:`fitted` then makes the stage lighter by the
option change that costs the least time per MB it saves, on as many layers
as that saving says the stage needs, until the stage fits or no change saves
memory.
"""

from __future__ import annotations

import numpy as np

from ..evaluate import ceiling
from ..setup import BalanceSetup
from .known_memory import KnownMemory

__all__ = ["exchanged", "fitted", "stage_exchanges"]


def _option_changes(setup: BalanceSetup) -> tuple[np.ndarray, np.ndarray]:
    """Every change of one layer's option within its kind: ``(from item, to item)`` pairs."""
    pairs = [(i, j) for kind in setup.kinds for i in setup.item_indices(kind) for j in setup.item_indices(kind)
             if i != j]
    return tuple(np.array(side, dtype=int) for side in zip(*pairs)) if pairs else (np.zeros(0, int),) * 2


def fitted(setup: BalanceSetup, counts: np.ndarray, memory: KnownMemory | None = None) -> np.ndarray:
    """Placements ``[n, item, chunk, stage]`` made to fit where recompute can do it (module docstring),
    pricing stages with ``memory`` (a search's own; default a new one).

    Returns a copy; a placement some stage of which still does not fit is
    returned as far as it got (:func:`sappkit.balancer.step.moves.valid` says so).
    """
    memory = KnownMemory(setup) if memory is None else memory
    counts = np.array(counts, dtype=int)
    source, target = _option_changes(setup)
    cost = (setup.forward + setup.backward)[target] - (setup.forward + setup.backward)[source]
    rows = np.arange(len(counts))
    while len(source) and len(rows):
        excess = memory.placement(counts[rows]) - ceiling(setup.memory_mb)
        worst = excess.argmax(axis=1)
        needed = excess[np.arange(len(rows)), worst]
        rows, worst, needed = rows[needed > 0], worst[needed > 0], needed[needed > 0]
        if not len(rows):
            break
        contents = counts[rows, :, :, worst]  # [row, item, chunk]
        found, chunk, change, layers = _cheapest_saving(memory, contents, worst, needed, source, target, cost)
        rows, worst = rows[found], worst[found]
        counts[rows, source[change], chunk, worst] -= layers
        counts[rows, target[change], chunk, worst] += layers
    return counts


def _cheapest_saving(memory, contents, stages, needed, source, target, cost):
    """Per stage content ``[row, item, chunk]`` over the limit by ``needed`` MB: whether an option change
    saves memory, and the one of least time per MB saved (its chunk, its index into ``source`` and
    ``target``) with the layers to change: as many as the saving of one says the stage needs (at most as many
    as it holds), or one where that many would save less (a larger working set can outgrow the activation
    saved), so the stage's memory always falls."""
    setup = memory.setup
    rows, chunks = np.arange(len(contents)), np.arange(setup.chunks)[:, None]
    trials = np.repeat(contents[:, None, None], setup.chunks * len(source), axis=1).reshape(
        len(contents), setup.chunks, len(source), *contents.shape[1:])  # [row, chunk, change, item, chunk]
    changes = np.arange(len(source))[None, :]
    trials[:, chunks, changes, source[None, :], chunks] -= 1
    trials[:, chunks, changes, target[None, :], chunks] += 1
    after = memory.total(trials, stages[:, None, None])
    saved = memory.total(contents, stages)[:, None, None] - after
    useful = (contents[:, source, :].swapaxes(1, 2) > 0) & (saved > 1e-9)
    score = np.where(useful, cost[None, None, :] / np.where(useful, saved, 1.0), np.inf).reshape(len(rows), -1)
    best = score.argmin(axis=1)
    found = np.isfinite(score[rows, best])
    rows, chunk, change = rows[found], *np.divmod(best[found], len(source))
    layers = np.minimum(contents[rows, source[change], chunk],
                        np.ceil(needed[found] / saved[rows, chunk, change]).astype(int))
    many = contents[rows].copy()
    many[np.arange(len(rows)), source[change], chunk] -= layers
    many[np.arange(len(rows)), target[change], chunk] += layers
    layers[memory.total(many, stages[found]) > after[rows, chunk, change]] = 1
    return found, chunk, change, layers


def exchanged(setup: BalanceSetup, counts: np.ndarray, first: np.ndarray, second: np.ndarray,
              memory: KnownMemory | None = None) -> np.ndarray:
    """Placements ``counts`` (``[n, item, chunk, stage]``) with stages ``first[n]`` and ``second[n]`` trading
    their layers, :func:`fitted` (with ``memory``)."""
    rows = np.arange(len(counts))
    counts = np.array(counts)
    counts[rows, :, :, first], counts[rows, :, :, second] = counts[rows, :, :, second], counts[rows, :, :, first]
    return fitted(setup, counts, memory)


def stage_exchanges(setup: BalanceSetup, counts: np.ndarray, memory: KnownMemory | None = None) -> np.ndarray:
    """``counts`` with every pair of stages exchanged, :func:`fitted` (with ``memory``): ``[pair, item, chunk,
    stage]``."""
    first, second = np.triu_indices(setup.stages, 1)
    return exchanged(setup, np.repeat(np.asarray(counts)[None], len(first), axis=0), first, second, memory)
