"""The simulated step time of placements: exact, many at once, with the path that sets it.

A placement's step time is what :meth:`sappkit.Plan.simulate` measures: the
longest path through the schedule's dependency graph
(:mod:`sappkit.pipeline.critical`) with each cell's forward, backward and
(split schedules) input- and weight-pass times. Those times are linear in the
placement, ``D(c, s) = Σ_i counts[i, c, s] d_i + D_fixed(c, s)``, so
:class:`StepTimer` turns a batch of placements into duration vectors with one
tensor product and times them in one sweep over the graph. The result equals
``plan.simulate().step_time`` up to float rounding in the cell sums (the
tests hold it to 1e-9).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...columns import ACTIVATION_MB, BACKWARD_INPUT_TIME, BACKWARD_WEIGHT_TIME, KIND, OPTION
from ...pipeline.costs import split_backward
from ...pipeline.critical import StepGraph, step_ends, step_graph, step_runs, step_times
from ...pipeline.paths import critical_path
from ..setup import BalanceSetup

__all__ = ["StepTimer", "step_timer", "PHASE_COUNT"]

#: Durations per cell: forward, backward, input pass, weight pass (the op phases of the simulator).
PHASE_COUNT = 4


@dataclass(frozen=True, eq=False)
class StepTimer:
    """Times placements of one :class:`BalanceSetup` as the simulator does (built by :func:`step_timer`)."""

    graph: StepGraph
    per_item: np.ndarray
    """``[phase, item]``: one layer's forward, backward, input- and weight-pass time."""
    fixed: np.ndarray
    """``[phase, chunk, stage]``: head and tail."""
    order: np.ndarray
    """Flat cell index ``chunk p + stage`` of each position in model order."""

    def durations(self, counts: np.ndarray) -> np.ndarray:
        """Duration vectors (``[..., phase L + position]``) of placements ``[..., item, chunk, stage]``."""
        counts = np.asarray(counts, dtype=float)
        cells = np.tensordot(counts, self.per_item, axes=([-3], [1]))  # [..., chunk, stage, phase]
        cells = np.moveaxis(cells, -1, -3) + self.fixed
        flat = cells.reshape(*cells.shape[:-2], -1)[..., self.order]
        return flat.reshape(*flat.shape[:-2], -1)

    def times(self, counts: np.ndarray) -> np.ndarray:
        """Simulated step times of a batch of placements ``[n, item, chunk, stage]``."""
        return step_times(self.graph, self.durations(counts))

    def times_and_ends(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Step times of a batch of placements and the sums of their ops' end times (:func:`step_ends`)."""
        return step_ends(self.graph, self.durations(counts))

    def runs(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`times_and_ends` and every op's end time ``[op, placement]`` (:func:`step_runs`: the ops level by
        level), whose column gives :meth:`critical` of its placement without timing it again."""
        return step_runs(self.graph, self.durations(counts))

    def time(self, counts: np.ndarray) -> float:
        """Simulated step time of one placement."""
        return float(self.times(np.asarray(counts)[None])[0])

    def critical(self, counts: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
        """How often each duration lies on one longest path of one placement's step (a duration vector); its
        op ``ends`` (a column of :meth:`runs`), when given, are not computed again."""
        return critical_path(self.graph, self.durations(counts), ends=ends)

    def cell_weights(self, paths: np.ndarray) -> np.ndarray:
        """``[path, item, chunk p + stage]``: the length one layer of the item adds to each path on the cell."""
        paths = np.atleast_2d(paths)
        per_cell = np.zeros((len(paths), PHASE_COUNT, self.fixed.shape[1] * self.fixed.shape[2]))
        per_cell[:, :, self.order] = paths.reshape(len(paths), PHASE_COUNT, -1)
        return np.einsum("fi,pfq->piq", self.per_item, per_cell)


def step_timer(setup: BalanceSetup) -> StepTimer:
    """The :class:`StepTimer` of ``setup``: its schedule's graph and per-layer phase times."""
    graph = step_graph(setup.schedule, setup.stages, setup.micro_batches, setup.chunks, setup.seq_split,
                       setup.less_memory)
    table = setup.layers.frame.set_index([KIND, OPTION])
    split = split_backward(table.loc[list(setup.items)], setup.backward, setup.recompute, setup.activation)
    per_item = np.stack([setup.forward, setup.backward, split[BACKWARD_INPUT_TIME], split[BACKWARD_WEIGHT_TIME]])
    fixed = np.zeros((PHASE_COUNT, setup.chunks, setup.stages))
    for item in setup.fixed:
        row = table.xs(item.kind, level=KIND).iloc[:1]
        parts = split_backward(row, np.array([item.backward_time]), np.zeros(1), row[ACTIVATION_MB].to_numpy())
        fixed[:, item.chunk, item.stage] += (item.forward_time, item.backward_time,
                                             float(parts[BACKWARD_INPUT_TIME][0]),
                                             float(parts[BACKWARD_WEIGHT_TIME][0]))
    order = np.array([c * setup.stages + s for c, s in setup.cells])
    return StepTimer(graph=graph, per_item=per_item, fixed=fixed, order=order)

