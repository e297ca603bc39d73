"""What the one-more-recomputed-layer analysis returns: the frames, and a plan per alternative.

:class:`Alternatives` holds one row per plan and the per-stage memory of
every plan; each plan is an :class:`AlternativePlan`, a
:class:`~sappkit.RecomputeChoice` built, from arrays the analysis already
summed, with the frames :func:`sappkit.recompute.choice.build_choice` would
build (built when first read: the frames cost more than the search).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..columns import (
    ACTIVATION_MB, CHUNK, CONST_MB, IN_FLIGHT, KIND, LIMIT_MB, MEMORY_MB, OPTION, OVERHEAD_MB, PARAM_MB, STAGE, TIME,
    WORKING_MB,
)
from ..layers.units import layer_ranges
from ..recompute.choice import MODE, OFFLOADED_MB, RANGE_COLUMNS, RecomputeChoice
from ..recompute.pricing import BACKWARD_MB, BASELINE_MEMORY_MB, TIME_SAVED, TRANSIT_MB, Pricing

__all__ = ["Alternatives", "AlternativePlan", "ALTERNATIVE_COLUMNS", "STAGE_COLUMNS", "ALTERNATIVE", "FROM_MODE",
           "LAYERS_CHANGED", "MEMORY_FREED_MB", "TIME_COST", "STAGE_MEMORY_MB", "ENDS_WARM_UP", "FIRST_LAYER",
           "LAYER", "PlanList", "no_alternatives", "stage_columns", "build_plan", "layer_ranges"]

ALTERNATIVE = "alternative"
FROM_MODE = "from_mode"
LAYERS_CHANGED = "layers_changed"
MEMORY_FREED_MB = "memory_freed_mb"
TIME_COST = "time_cost"
STAGE_MEMORY_MB = "stage_memory_mb"
ENDS_WARM_UP = "ends_warm_up"
FIRST_LAYER = "first_layer"
LAYER = "layer"
#: Columns of :attr:`Alternatives.frame`, one row per plan.
ALTERNATIVE_COLUMNS = (ALTERNATIVE, STAGE, KIND, FROM_MODE, LAYERS_CHANGED, MEMORY_MB, MEMORY_FREED_MB, TIME_COST,
                       STAGE_MEMORY_MB, IN_FLIGHT, ENDS_WARM_UP, FIRST_LAYER)
#: Columns of :attr:`Alternatives.stages` (and of every plan's ``stages``, ``alternative`` aside).
STAGE_COLUMNS = (STAGE, PARAM_MB, ACTIVATION_MB, OVERHEAD_MB, WORKING_MB, CONST_MB, MEMORY_MB, LIMIT_MB,
                 BACKWARD_MB, TRANSIT_MB, TIME, TIME_SAVED, BASELINE_MEMORY_MB)


@dataclass(frozen=True, eq=False, repr=False)  # the choice's short repr
class AlternativePlan(RecomputeChoice):
    """A :class:`~sappkit.RecomputeChoice` one more fully recomputed layer reaches.

    Attributes
    ----------
    dimensions : tuple of (str, int)
        The parallel degrees of the strategy the plan was priced at (empty
        when none were stated); an analysis at other degrees refuses it.
    """

    dimensions: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, eq=False)
class Alternatives:
    """The plans one more fully recomputed layer reaches from ``current``.

    Attributes
    ----------
    frame : DataFrame
        One row per plan (:data:`ALTERNATIVE_COLUMNS`): ``alternative`` (its
        number, the index into ``plans``), ``stage`` and ``kind`` of the
        layer turned up, ``from_mode`` (the mode it leaves), ``layers_changed``
        (the body layers whose mode changed once the group's counts are
        reassigned in canonical order, as ranges of their indices such as
        ``"35-36"``: :func:`layer_ranges`), ``memory_mb`` (the plan's peak: its
        heaviest stage), ``memory_freed_mb`` and ``time_cost`` (on its stage:
        the memory it no longer holds, always positive: a plan that holds as
        much or more is left out, see ``left_out``; and the forward + backward
        time per micro-batch it adds, in the frame's ``attrs["time_unit"]``),
        ``stage_memory_mb`` (the stage's new memory), and the group's
        ``in_flight``, ``ends_warm_up`` and ``first_layer``.
    stages : DataFrame
        Per-stage memory per plan, long form: ``alternative`` then
        :data:`STAGE_COLUMNS` (the shared stage schema, as
        ``RecomputeChoice.stages``).
    plans : sequence of AlternativePlan
        One plan per row, usable as any choice (``.trainer_plan()``,
        ``.stages``) and as the ``current`` of a next step.
    current : RecomputeChoice or DataFrame
        The plan the alternatives start from (a ranges frame is made a
        choice once it is checked).
    reason : str or None
        Why there are none, when there are none.
    left_out : int
        Distinct plans that fit but free no memory on their stage (the layer
        that ends warm-up, at ``full``, rebuilds the plain layer's activations
        for its backward, which can outweigh what it keeps less); each would
        cost time for nothing, so none is listed.
    """

    frame: pd.DataFrame
    stages: pd.DataFrame
    plans: Sequence[AlternativePlan]
    current: RecomputeChoice | pd.DataFrame
    reason: str | None = None
    left_out: int = 0

    def __repr__(self) -> str:
        return f"<Alternatives {self._headline()}>"

    def _repr_html_(self) -> str:
        from ..layers.units import html_summary

        shown = self.frame.drop(columns=[STAGE_MEMORY_MB, IN_FLIGHT, ENDS_WARM_UP, FIRST_LAYER])
        return html_summary([self._headline()], shown, self.frame.attrs.get("time_unit"))

    def _headline(self) -> str:
        if self.reason is not None:
            return f"none: {self.reason}"
        left_out = f" ({self.left_out} more that free no memory left out)" if self.left_out else ""
        return f"{len(self.frame)} plan(s) with one more layer at 'full'{left_out}; stage {self.binding_stage} binds"

    @property
    def binding_stage(self) -> int:
        """The stage of ``current`` with the least room under the device limit (the most over it)."""
        stages = self.current.stages
        return int(stages[STAGE].iloc[int(np.argmax((stages[MEMORY_MB] - stages[LIMIT_MB]).to_numpy()))])


class PlanList(Sequence):
    """Plans built the first time each is read, then kept."""

    def __init__(self, build: Callable[[int], AlternativePlan], count: int):
        self._build = build
        self._built: list[AlternativePlan | None] = [None] * count

    def __len__(self) -> int:
        return len(self._built)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        plan = self._built[index]
        if plan is None:
            plan = self._built[index] = self._build(range(len(self))[index])
        return plan


def no_alternatives(current, reason: str) -> Alternatives:
    """No plan, and why."""
    stages = pd.DataFrame({ALTERNATIVE: pd.Series(dtype=int), **{c: pd.Series(dtype=float) for c in STAGE_COLUMNS}})
    return Alternatives(pd.DataFrame({column: [] for column in ALTERNATIVE_COLUMNS}), stages, (), current, reason)


def stage_columns(fixed: dict[str, np.ndarray], values: dict[str, np.ndarray], rows) -> dict[str, np.ndarray]:
    """The shared stage columns of plans ``rows``, each ``[plan, stage]``: from ``values`` (each ``[plan,
    stage]``) where they change with the plan, else from ``fixed`` (each per stage)."""
    count, p = len(rows), len(fixed[PARAM_MB])
    out = {STAGE: np.tile(np.arange(p), (count, 1))}
    for column in STAGE_COLUMNS[1:]:
        if column in values:
            out[column] = values[column][rows]
        elif column == TRANSIT_MB:
            out[column] = np.zeros((count, p))
        else:
            out[column] = np.broadcast_to(fixed[column], (count, p))
    return out


def build_plan(pricing: Pricing, body: dict[str, np.ndarray], modes: np.ndarray, stages: dict[str, np.ndarray],
               dimensions: tuple) -> AlternativePlan:
    """The plan running mode ``modes[l]`` (an index into ``pricing.modes``) on body layer ``l``.

    ``body`` holds the body's ``layer``, ``chunk``, ``stage``, ``kind``, an
    integer ``kind_code``, and the ``modes`` and their ``options`` (arrays in
    the order of ``pricing.modes``); ``stages`` the plan's stage columns.
    """
    names, options = body["modes"][modes], body["options"][modes]
    zeros = np.zeros(len(modes))
    layer_options = pd.DataFrame({LAYER: body[LAYER], CHUNK: body[CHUNK], STAGE: body[STAGE], KIND: body[KIND],
                                  OPTION: options, MODE: names, OFFLOADED_MB: zeros})
    code = body["kind_code"] * len(pricing.modes) + modes
    starts = np.flatnonzero(np.concatenate(([True], code[1:] != code[:-1])))
    counts = np.diff(np.concatenate((starts, [len(modes)])))
    ranges = pd.DataFrame(dict(zip(RANGE_COLUMNS, (body[LAYER][starts], counts, body[KIND][starts], options[starts],
                                                    names[starts], zeros[starts]))))
    return AlternativePlan(ranges, pd.DataFrame(stages), None, None, (), pricing, layer_options,
                           dimensions=dimensions)
