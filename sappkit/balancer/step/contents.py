"""What each stage may hold, as the step objective's exact search sees it: contents and the runs that hold them.

The step time is the longest path through the schedule's graph, which only grows with any op's duration.
So of all the ways a stage's layers may sit on its cells and recompute, only those whose cell times no
other that fits beats on every cell at once matter: a stage's *contents*, each with its layers per item
and cell and its four phase times per cell (forward, backward, input and weight pass, head or tail
included). Its *runs* say where in the model each content may start and how many layers it takes, so a
placement is one run per stage, each starting where the last ended.

With one chunk (any body kinds in model order) a stage holds one run of the model
(:mod:`sappkit.balancer.exact.segments`), ``n`` layers from position ``pos``, so a fixed number of each
kind, and a run's forward is fixed by its layers: the one content per run is its mix of least backward that
fits (:func:`~sappkit.balancer.exact.segments.run_times`).

Contents are listed up to a cap on a stage's time ``F + B``: a stage runs every unit's forward and backward
one after another, so a step of ``T`` holds no stage whose ``units`` such rounds take longer.

(With several chunks the same contents exist, every product of a stage's cells' Pareto-front mixes, but the
proof's per-path bounds stay far below the step there: a path alone lets the layers gather wherever it is
short, and the search cannot prune. Those set-ups keep the local search.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..exact.cells import Cache
from ..exact.segments import run_front, run_times, uneven_options
from ..setup import BalanceSetup
from .steptime import StepTimer

__all__ = ["StageContents", "stage_contents", "why_not_applicable"]


@dataclass(frozen=True)
class StageContents:
    """Per stage, its contents and the runs that hold them (built by :func:`stage_contents`)."""

    mixes: tuple[np.ndarray, ...]
    """Per stage ``[content, item, chunk]``: layers of each item on each of the stage's cells."""
    phases: tuple[np.ndarray, ...]
    """Per stage ``[content, phase, chunk]``: each cell's forward, backward, input- and weight-pass time."""
    starts: tuple[np.ndarray, ...]
    """Per stage, the model position where each listed run starts."""
    lengths: tuple[np.ndarray, ...]
    """Per stage, each listed run's layers."""
    content: tuple[np.ndarray, ...]
    """Per stage, each listed run's content (an index into the stage's contents)."""
    total: int
    """Body layers of the model (the last model position)."""

    def placement(self, chosen: list[int]) -> np.ndarray:
        """The counts ``[item, chunk, stage]`` of one content per stage."""
        return np.stack([self.mixes[s][c] for s, c in enumerate(chosen)], axis=-1)

    def durations(self, timer: StepTimer, chosen: list[int]) -> np.ndarray:
        """The duration vector (:meth:`StepTimer.durations`) of one content per stage."""
        return timer.durations(self.placement(chosen))


def why_not_applicable(setup: BalanceSetup) -> str:
    """Why stage contents do not describe ``setup``'s placements ('' when they do)."""
    if setup.chunks > 1:
        return f"{setup.chunks} chunks: the proof's bounds are too weak there (module docstring)"
    if setup.consistency is not None:
        return "recompute consistency between body kinds ties the options of a stage's kinds"
    return uneven_options(setup)


def stage_contents(setup: BalanceSetup, timer: StepTimer, cache: Cache, cap: float) -> StageContents:
    """Every stage's contents whose time ``F + B`` is at most ``cap`` (module docstring).

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit.balancer.setup import make_setup
    >>> from sappkit.balancer.step.steptime import step_timer
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1,
    ...              backward_time=bt, activation_mb=a) for o, bt, a in (("none", 2, 50), ("full", 3, 5))]
    >>> setup = make_setup(pd.DataFrame(rows), stages=2, micro_batches=2, memory_mb=400, objective="step")
    >>> contents = stage_contents(setup, step_timer(setup), Cache(), cap=12.0)
    >>> contents.mixes[0][:, :, 0].tolist(), contents.phases[0][:, 1, 0].tolist()
    ([[0, 0], [1, 0], [1, 1], [0, 3]], [0.0, 2.0, 5.0, 9.0])
    """
    parts = _one_chunk(setup, timer, cache, cap)
    return StageContents(*(tuple(part[k] for part in parts) for k in range(5)), total=int(setup.counts.sum()))


def _phases(timer: StepTimer, mixes: np.ndarray, s: int) -> np.ndarray:
    """``[content, phase, chunk]`` of contents ``[content, item, chunk]`` on stage ``s``."""
    return np.einsum("fi,nic->nfc", timer.per_item, mixes) + timer.fixed[None, :, :, s]


def _one_chunk(setup: BalanceSetup, timer: StepTimer, cache: Cache, cap: float) -> list[tuple]:
    """Per stage ``(mixes, phases, starts, lengths, content)`` of a one-chunk pipeline's runs."""
    start, length, value, point = run_times(setup, cache, cap)
    compositions = np.maximum(0, np.minimum(start[:, None] + length[:, None], np.cumsum(setup.counts))
                              - np.maximum(start[:, None], np.r_[0, np.cumsum(setup.counts)[:-1]]))
    parts = []
    for s in range(setup.stages):
        listed = np.flatnonzero(np.isfinite(value[s]))
        kinds, content = np.unique(compositions[listed], axis=0, return_inverse=True)
        first = np.array([listed[np.flatnonzero(content == c)[0]] for c in range(len(kinds))], dtype=int)
        mixes = np.array([run_front(setup, tuple(int(n) for n in kinds[c]), cache, working=setup.working_set)
                          .mix[point[s, r]] for c, r in enumerate(first)]).reshape(len(kinds), len(setup.items), 1)
        parts.append((mixes, _phases(timer, mixes, s), start[listed], length[listed], content.reshape(-1)))
    return parts
