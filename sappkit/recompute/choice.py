"""The result of the recompute chooser: each body layer's option, as ranges, with every stage's memory and time.

:class:`RecomputeChoice` holds frames (``ranges``, ``stages``,
``layer_options``) and states the choice in trainer-neutral terms: the
seed's trainer plan (:meth:`RecomputeChoice.trainer_plan`) and per-layer
lists (:meth:`RecomputeChoice.recompute_lists`), from
:mod:`sappkit.recompute.trainer_plan`. The runtimes' own settings are the
trainers' (:mod:`sappkit.trainers.recompute`, :func:`sappkit.export_config`),
which import this folder, never the other way round.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ..columns import CHUNK, KIND, LAYERS, MEMORY_MB, OPTION, STAGE
from ..errors import InputError
from ..layers.units import format_mb, format_time, html_summary, with_time_unit
from ..pipeline.costs import cell_costs
from ..pipeline.simulator import Simulation, simulate
from .changes import CHANGE_COLUMNS, change_lines, layout_changes
from .pricing import BASELINE_MEMORY_MB, TIME_SAVED, Pricing
from .trainer_plan import recompute_lists, trainer_plan

__all__ = ["RecomputeChoice", "build_choice", "refused_choice", "RANGE_COLUMNS", "MODE", "OFFLOADED_MB"]

MODE = "mode"
OFFLOADED_MB = "offloaded_mb"
FIRST = "first"
COUNT = "count"
#: Columns of :attr:`RecomputeChoice.ranges`.
RANGE_COLUMNS = (FIRST, COUNT, KIND, OPTION, MODE, OFFLOADED_MB)


@dataclass(frozen=True, eq=False)
class RecomputeChoice:
    """Every body layer's recompute option, and what it does to each stage.

    Attributes
    ----------
    ranges : DataFrame
        ``first``, ``count``, ``kind``, ``option``, ``mode`` (None unless the
        choice is among modes), ``offloaded_mb`` (MB per micro-batch each
        layer of the range moves to the host): consecutive layers that run
        alike, model order. Empty when no choice was made.
    stages : DataFrame
        Per stage the shared memory schema (``stage``, ``param_mb``,
        ``activation_mb``, ``overhead_mb``, ``working_mb``, ``const_mb``,
        ``memory_mb`` = the higher peak, ``limit_mb``) plus ``backward_mb``
        (second peak, NaN without), ``transit_mb``, ``time`` (the stage time:
        forward + backward per micro-batch of every layer the stage holds,
        head and tail included, as a balancer plan's and the simulator's),
        ``time_saved`` (against :attr:`baseline`) and
        ``baseline_memory_mb`` (the stage's memory under :attr:`baseline`,
        beside the choice's); times in :attr:`time_unit` (the frame's
        ``attrs["time_unit"]``). When no choice was made: the stages with
        every layer at its lightest option.
    mode : str or None
        The mode every layer runs, for a one-mode choice.
    reason : str or None
        Why no choice was made (None when one was).
    notes : tuple of str
        What the chooser left aside (e.g. a host link it could not use).
    pricing : Pricing
        The prices the choice was made with (for re-evaluation and analysis).
    layer_options : DataFrame
        One row per body layer: ``layer``, ``chunk``, ``stage``, ``kind``,
        ``option``, ``mode``, ``offloaded_mb``.
    """

    ranges: pd.DataFrame
    stages: pd.DataFrame
    mode: str | None
    reason: str | None
    notes: tuple[str, ...]
    pricing: Pricing
    layer_options: pd.DataFrame

    def __post_init__(self):
        with_time_unit(self.stages, self.time_unit)

    @property
    def chosen(self) -> bool:
        """True when a choice was made (``reason`` is None)."""
        return self.reason is None

    @property
    def time_unit(self) -> str:
        """The unit of every time of the choice: its layer table's."""
        return self.pricing.layers.time_unit

    @property
    def baseline(self) -> str:
        """What time saved is measured against, in words: the configured recompute where it fits every stage,
        else the fastest single option that fits every layer, else every layer at its most recomputed option
        (:attr:`sappkit.recompute.pricing.Pricing.baseline`; see also :attr:`fastest_single`)."""
        return self.pricing.baseline.text

    @property
    def time_saved(self) -> float:
        """Forward + backward time per micro-batch saved against :attr:`baseline`, summed over the stages'
        body layers (NaN without a choice): a sum of per-stage times, not a step time (:attr:`step_time_saved`).

        Never negative when the chooser's own choice is asked about: the
        baseline fits, so each stage's knapsack could pick it. Rounded to
        1e-9 time units, so a choice that keeps the baseline saves exactly 0
        rather than the float noise of the sums.
        """
        return round(float(self.stages[TIME_SAVED].sum()), 9) + 0.0 if self.chosen else float("nan")

    @cached_property
    def step_time(self) -> float:
        """The simulated step time of the choice (:meth:`simulate`); NaN without a choice or with offload."""
        if not self.chosen or (self.layer_options[OFFLOADED_MB] > 0).any():
            return float("nan")
        return self.simulate().step_time

    @cached_property
    def baseline_step_time(self) -> float:
        """The simulated step time of :attr:`baseline` on the same partition (NaN without a choice)."""
        if not self.chosen:
            return float("nan")
        return _simulate_options(self.pricing, self.pricing.baseline.options).step_time

    @property
    def step_time_saved(self) -> float:
        """How much shorter the simulated step is than the baseline's: the headline (negative when longer)."""
        return self.baseline_step_time - self.step_time

    @property
    def fastest_single(self) -> str | None:
        """Where the baseline is the configured recompute and a single option that fits every stage runs faster
        (every layer ``full`` configured, ``selective`` fitting): that option, which the choice is also stated
        against (:attr:`sappkit.recompute.baseline.Baseline.fastest_single`); else None."""
        return self.pricing.baseline.fastest_single if self.chosen else None

    @cached_property
    def fastest_single_step_time(self) -> float:
        """The simulated step time of every layer at :attr:`fastest_single` (NaN without one)."""
        if self.fastest_single is None:
            return float("nan")
        return _simulate_options(self.pricing, [self.fastest_single] * len(self.layer_options)).step_time

    @property
    def fastest_single_step_time_saved(self) -> float:
        """How much shorter the simulated step is than every layer at :attr:`fastest_single` (NaN without one)."""
        return self.fastest_single_step_time - self.step_time

    def simulate(self, **options) -> Simulation:
        """Simulate one step of the choice on its partition (``options`` as :func:`sappkit.simulate`'s).

        Refuses a choice that was not made, and one that offloads to the
        host (the simulator runs no host copies).
        """
        if not self.chosen:
            raise InputError(f"choice made no choice to simulate: {self.reason}")
        if (self.layer_options[OFFLOADED_MB] > 0).any():
            raise InputError("choice offloads activations to the host, which the simulator does not model; "
                             "simulate a choice made without a link")
        return _simulate_options(self.pricing, self.layer_options[OPTION].tolist(), **options)

    @property
    def memory_mb(self) -> float:
        """The heaviest stage's memory (NaN when there are no stages)."""
        return float(self.stages[MEMORY_MB].max()) if len(self.stages) else float("nan")

    def layout_changes(self) -> pd.DataFrame:
        """Per stage where a layer runs otherwise than under :attr:`baseline`: the memory under each, the time
        saved, and which layers moved or changed option (:func:`sappkit.recompute.changes.layout_changes`; empty
        without a choice)."""
        if not self.chosen:
            return pd.DataFrame({column: [] for column in CHANGE_COLUMNS})
        return with_time_unit(layout_changes(self.pricing, self.layer_options, self.stages), self.time_unit)

    def configured_stages(self) -> pd.DataFrame:
        """The stage frame under the partition's configured options: the "before" of a before/after."""
        return self.pricing.evaluate(self.pricing.body["configured"].tolist())

    def baseline_stages(self) -> pd.DataFrame:
        """The stage frame under :attr:`baseline`'s options (the configured ones where they fit)."""
        return self.pricing.evaluate(list(self.pricing.baseline.options))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.short_headline() if self.chosen else f'no choice: {self.reason}'}>"

    def _repr_html_(self) -> str:
        if not self.chosen:
            return html_summary([f"no choice: {self.reason}"], self.stages, self.time_unit)
        return html_summary(self.headline(), self.ranges, self.time_unit)

    def short_headline(self) -> str:
        """One line for a title or a status: the simulated step time and its change against the baseline (with
        offload, which is not simulated, the summed time saved, said to be a sum)."""
        unit = self.time_unit
        if not self.chosen:
            return "no choice"
        if np.isnan(self.step_time):
            return (f"{format_time(self.time_saved, unit)} saved, forward + backward summed over the stages (offload "
                    "is not simulated)")
        return (f"simulated step time {format_time(self.step_time, unit)}, {self._change(self.baseline_step_time)} "
                "than the baseline")

    def headline(self) -> list[str]:
        """The choice's headline in words: its simulated step time against the baseline's, the baseline, the
        peak against the device, and the summed time saved (said to be a sum)."""
        unit = self.time_unit
        if np.isnan(self.step_time):
            step = "simulated step time: not simulated (the simulator runs no host copies)"
        else:
            step = (f"simulated step time {format_time(self.step_time, unit)}: "
                    f"{self._change(self.baseline_step_time)} than the baseline's "
                    f"{format_time(self.baseline_step_time, unit)}")
        summed = self.time_saved
        fastest = self.fastest_single_text()
        return [step, f"baseline: {self.baseline}", *([fastest] if fastest else []), self.peak_text(),
                f"forward + backward per micro-batch, summed over the stages: {format_time(abs(summed), unit)} "
                f"{'saved' if summed >= 0 else 'more'}"]

    def peak_text(self) -> str:
        """``peak 56,017 MB of 58,000 MB (stage 1)``, and the baseline's peak where it differs."""
        memory, before = self.stages[MEMORY_MB].to_numpy(), self.stages[BASELINE_MEMORY_MB].to_numpy()
        stages = self.stages[STAGE].to_numpy()
        text = f"peak {format_mb(memory.max())} of {format_mb(self.pricing.memory_mb)} (stage {stages[memory.argmax()]}"
        if format_mb(before.max()) != format_mb(memory.max()) or before.argmax() != memory.argmax():
            text += f"; the baseline's: {format_mb(before.max())} on stage {stages[before.argmax()]}"
        return text + ")"

    def fastest_single_text(self) -> str | None:
        """The choice against :attr:`fastest_single` in words, where there is one (and the step is simulated):
        ``against the fastest single option that fits, every layer selective (5,901 ms): 132 ms (2.2%) faster``.
        """
        if self.fastest_single is None or np.isnan(self.step_time):
            return None
        before = self.fastest_single_step_time
        return (f"against the fastest single option that fits, every layer {self.fastest_single} "
                f"({format_time(before, self.time_unit)}): {self._change(before)}")

    def _change(self, before: float) -> str:
        """The simulated step against ``before``: ``1,848 ms (24.3%) faster``, ``no faster``, ``... slower``."""
        saved = before - self.step_time
        if abs(saved) < 5e-4 * before:
            return "no faster"
        return (f"{format_time(abs(saved), self.time_unit)} ({abs(saved) / before:.1%}) "
                f"{'faster' if saved > 0 else 'slower'}")

    def describe(self) -> str:
        """The choice in words: its headline (:meth:`headline`), then one line per range."""
        if not self.chosen:
            return f"no choice: {self.reason}"
        lines = ([f"every layer: {self.mode}"] if self.mode is not None else []) + self.headline()
        for item in self.ranges.itertuples(index=False):
            last = item.first + item.count - 1
            where = f"layer {item.first}" if item.count == 1 else f"layers {item.first}-{last}"
            what = item.option if item.mode in (None, item.option) else f"{item.mode} ({item.option})"
            if item.offloaded_mb > 0:
                what += f", {format_mb(item.offloaded_mb)} per micro-batch offloaded to the host"
            lines.append(f"{where} ({item.kind}): {what}")
        lines.extend(change_lines(self.layout_changes()))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_records(self) -> list[dict]:
        """The ranges as plain data: ``first``, ``count``, ``kind``, ``option``, and ``mode`` and
        ``offloaded_mb`` where they apply."""
        records = []
        for item in self.ranges.itertuples(index=False):
            record = {FIRST: int(item.first), COUNT: int(item.count), KIND: item.kind, OPTION: item.option}
            if item.mode is not None:
                record[MODE] = item.mode
            if item.offloaded_mb > 0:
                record[OFFLOADED_MB] = float(item.offloaded_mb)
            records.append(record)
        return records

    def trainer_plan(self) -> tuple[str, dict[str, str]]:
        """``(mode, layers)`` as HyperParallel's trainer reads ``activation_checkpoint.mode`` / ``.layers``.

        See :func:`sappkit.recompute.trainer_plan.trainer_plan`; Megatron-LM's and torchtitan's settings:
        :func:`sappkit.trainers.recompute.megatron_setting`, :func:`~sappkit.trainers.recompute.torchtitan_setting`
        and :func:`sappkit.export_config`.
        """
        return trainer_plan(self)

    def recompute_lists(self) -> dict[str, list[int]]:
        """Per option (or mode), the body layer indices that run it: per-layer recompute lists."""
        return recompute_lists(self)


def _simulate_options(pricing: Pricing, options, **settings) -> Simulation:
    """One step of the pricing's partition with body layer ``l`` running ``options[l]``, simulated."""
    part = pricing.partition
    body = pricing.body[[KIND, CHUNK, STAGE]].assign(**{OPTION: list(options)})
    assignment = body.groupby([KIND, CHUNK, STAGE, OPTION], sort=False).size().rename(LAYERS).reset_index()
    costs = cell_costs(pricing.layers, assignment, stages=part.stages, chunks=part.chunks, schedule=part.schedule)
    return simulate(costs, schedule=part.schedule, micro_batches=part.micro_batches, less_memory=part.less_memory,
                    seq_split=part.seq_split, limit_mb=pricing.memory_mb, **settings)


def _ranges(layer_options: pd.DataFrame) -> pd.DataFrame:
    """Consecutive layers of one kind running alike (option, mode, offloaded MB), merged."""
    if layer_options.empty:
        return pd.DataFrame({column: [] for column in RANGE_COLUMNS})
    # str() of each value: pandas' astype(str) keeps None missing, and missing never equals itself.
    keys = [np.array([str(value) for value in layer_options[c]]) for c in (KIND, OPTION, MODE)]
    keys.append(layer_options[OFFLOADED_MB].to_numpy())
    changed = np.zeros(len(layer_options), dtype=bool)
    for key in keys:
        changed[1:] |= key[1:] != key[:-1]
    starts = np.flatnonzero(np.concatenate(([True], changed[1:])))
    counts = np.diff(np.concatenate((starts, [len(layer_options)])))
    rows = layer_options.iloc[starts]
    return pd.DataFrame({FIRST: rows["layer"].to_numpy(), COUNT: counts, KIND: rows[KIND].to_numpy(),
                         OPTION: rows[OPTION].to_numpy(), MODE: rows[MODE].to_numpy(),
                         OFFLOADED_MB: rows[OFFLOADED_MB].to_numpy(float)})


def build_choice(pricing: Pricing, options, *, mode: str | None = None, offloaded_mb=None, copy_time=None,
                 transit_mb=None, notes=()) -> RecomputeChoice:
    """A choice from each body layer's option (and offload), evaluated with ``pricing``."""
    body = pricing.body
    offloaded = np.zeros(len(body)) if offloaded_mb is None else np.asarray(offloaded_mb, dtype=float)
    modes = pricing.option_modes()
    layer_options = pd.DataFrame({
        "layer": body["layer"].to_numpy(), CHUNK: body[CHUNK].to_numpy(), STAGE: body[STAGE].to_numpy(),
        KIND: body[KIND].to_numpy(), OPTION: list(options),
        MODE: [modes.get(option) for option in options] if modes else [None] * len(body),
        OFFLOADED_MB: offloaded,
    })
    stages = pricing.evaluate(list(options), offloaded_mb=offloaded, copy_time=copy_time, transit_mb=transit_mb)
    return RecomputeChoice(_ranges(layer_options), stages, mode, None, tuple(notes), pricing, layer_options)


def refused_choice(pricing: Pricing, reason: str, *, notes=(), stages: pd.DataFrame | None = None) -> RecomputeChoice:
    """A result that makes no choice, saying why (``stages``: what to show instead, default none)."""
    layer_options = pd.DataFrame({column: [] for column in ("layer", CHUNK, STAGE, KIND, OPTION, MODE,
                                                            OFFLOADED_MB)})
    stages = pd.DataFrame() if stages is None else stages
    return RecomputeChoice(_ranges(layer_options), stages, None, reason, tuple(notes), pricing, layer_options)
