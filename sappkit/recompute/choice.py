"""The result of the recompute chooser: each body layer's option, as ranges, with every stage's memory and time.

:class:`RecomputeChoice` holds frames (``ranges``, ``stages``,
``layer_options``) and states the choice for runtimes: HyperParallel's
trainer (:meth:`RecomputeChoice.trainer_plan`), Megatron-LM
(:meth:`RecomputeChoice.megatron`) and torchtitan
(:meth:`RecomputeChoice.torchtitan`); see :mod:`sappkit.recompute.export`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..columns import CHUNK, KIND, MEMORY_MB, OPTION, STAGE
from .export import RuntimeSetting, megatron_setting, recompute_lists, torchtitan_setting, trainer_plan
from .pricing import TIME_SAVED, Pricing

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
        (second peak, NaN without), ``transit_mb``, ``time`` and
        ``time_saved`` (against the configured options). When no choice was
        made: the stages with every layer at its lightest option.
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

    @property
    def chosen(self) -> bool:
        """True when a choice was made (``reason`` is None)."""
        return self.reason is None

    @property
    def time_saved(self) -> float:
        """Time saved against the configured options, summed over stages (NaN without a choice).

        Rounded to 1e-9 time units, so a choice that keeps the configured
        options saves exactly 0 rather than the float noise of the sums.
        """
        return round(float(self.stages[TIME_SAVED].sum()), 9) + 0.0 if self.chosen else float("nan")

    @property
    def memory_mb(self) -> float:
        """The heaviest stage's memory (NaN when there are no stages)."""
        return float(self.stages[MEMORY_MB].max()) if len(self.stages) else float("nan")

    def configured_stages(self) -> pd.DataFrame:
        """The stage frame under the partition's configured options: the "before" of a before/after."""
        return self.pricing.evaluate(self.pricing.body["configured"].tolist())

    def describe(self) -> str:
        """The choice in words: a summary line, then one line per range."""
        if not self.chosen:
            return f"no choice: {self.reason}"
        head = f"every layer: {self.mode}; " if self.mode is not None else ""
        lines = [f"{head}time saved {self.time_saved:.4g} against the configured recompute; "
                 f"peak {self.memory_mb:.1f} MB of {self.pricing.memory_mb:.1f} MB"]
        for item in self.ranges.itertuples(index=False):
            last = item.first + item.count - 1
            where = f"layer {item.first}" if item.count == 1 else f"layers {item.first}-{last}"
            what = item.option if item.mode is None else f"{item.mode} ({item.option})"
            if item.offloaded_mb > 0:
                what += f", {item.offloaded_mb:.1f} MB per micro-batch offloaded to the host"
            lines.append(f"{where} ({item.kind}): {what}")
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

        See :func:`sappkit.recompute.export.trainer_plan`.
        """
        return trainer_plan(self)

    def recompute_lists(self) -> dict[str, list[int]]:
        """Per option (or mode), the body layer indices that run it: per-layer recompute lists."""
        return recompute_lists(self)

    def megatron(self) -> RuntimeSetting:
        """The choice as Megatron-LM recompute arguments, where they can express it."""
        return megatron_setting(self)

    def torchtitan(self) -> RuntimeSetting:
        """The choice as torchtitan's ``[activation_checkpoint]`` section, where it can express it."""
        return torchtitan_setting(self)


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
