"""Plots of the recompute chooser: the time-saved curve, stage memory before and after, each layer's option."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from .._check import check_choice
from .._frames import check_frame
from ..errors import InputError
from ..layers.units import time_unit_of
from ..recompute.chooser import SWEEP_COLUMNS, RecomputeChoice
from ._axes import axes_for, axes_list, optional_number, time_label
from .pipeline import plot_stage_memory

__all__ = ["plot_time_saved", "plot_before_after", "plot_layer_options"]

#: Colours of the SAPP options, least to most recompute; other options cycle through the rest.
_OPTION_COLORS = {"none": "#4c72b0", "selective": "#55a868", "comm": "#8172b2", "both": "#ccb974",
                  "full": "#c44e52"}
_OTHER_COLORS = ("#64b5cd", "#937860", "#da8bc3", "#8c8c8c")
_AGAINST = {"configured": ("time_saved", "against the baseline: configured where it fits, else the most recomputed"),
            "full": ("time_saved_vs_full", "against full recompute everywhere")}


def plot_time_saved(sweep: pd.DataFrame, *, current_mb: float | None = None, against: str = "configured",
                    ax: Axes | None = None) -> Axes:
    """Time saved against the device capacity (:func:`sappkit.sweep_recompute`'s frame).

    Time saved is the body layers' forward + backward time for one
    micro-batch, summed over the stages (not a step time), in the frame's
    ``attrs["time_unit"]``.

    ``against`` is ``"configured"`` (the ``time_saved`` column: against the
    baseline the chooser states, the configured recompute where it fits,
    else every layer at its most recomputed option) or ``"full"`` (or
    ``"both"`` for two lines); capacities where nothing fits are shaded;
    ``current_mb`` marks the budget in use.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(memory_mb=[100, 200, 300], feasible=[False, True, True], mode=None,
    ...                           time=[np.nan, 5.0, 4.0], time_saved=[np.nan, 0.0, 1.0],
    ...                           time_saved_vs_full=[np.nan, 2.0, 3.0], baseline=[None, "configured", "configured"]))
    >>> [t.get_text() for t in plot_time_saved(frame, current_mb=250, against="both").get_legend().get_texts()][1:]
    ['against full recompute everywhere', 'nothing fits', 'budget 250 MB']
    """
    unit = time_unit_of(sweep)
    sweep = check_frame(sweep, "sweep", SWEEP_COLUMNS, "sweep_recompute's frame",
                        numeric=("memory_mb",), gaps=("time", "time_saved", "time_saved_vs_full"))
    check_choice("against", against, (*_AGAINST, "both"))
    current_mb = optional_number("current_mb", current_mb)
    ax = axes_for(ax, (7, 4))
    frame = sweep.sort_values("memory_mb")
    x = frame["memory_mb"].to_numpy(float)
    for name in (("configured", "full") if against == "both" else (against,)):
        column, label = _AGAINST[name]
        ax.plot(x, frame[column].to_numpy(float), drawstyle="steps-post", marker=".", label=label)
    infeasible = ~frame["feasible"].to_numpy(bool)
    if infeasible.any():
        ax.axvspan(x.min(), x[infeasible].max(), color="0.9", zorder=0, label="nothing fits")
    if current_mb is not None:
        ax.axvline(current_mb, color="black", linestyle=":", label=f"budget {current_mb:,.0f} MB")
    ax.axhline(0, color="0.6", linewidth=0.8)
    ax.set_xlabel("device memory (MB)")
    ax.set_ylabel(time_label("time saved", unit) + "\nfwd + bwd per micro-batch, summed over the stages")
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    return ax


def plot_before_after(choice: RecomputeChoice, *, axes=None) -> tuple[Axes, Axes]:
    """Stage memory under the configured options and under the choice, side by side, on one scale; the choice's
    title is its simulated step time against the baseline (:meth:`RecomputeChoice.short_headline`)."""
    if not isinstance(choice, RecomputeChoice):
        raise InputError(f"choice must be a RecomputeChoice; got {type(choice).__name__}")
    if choice.pricing.reason is not None:
        raise InputError(f"there is no stage memory to plot: {choice.pricing.reason}")
    if axes is None:
        width = max(8.0, 0.5 * len(choice.stages) + 5)
        axes = plt.subplots(1, 2, figsize=(width, 4), sharey=True, layout="constrained")[1]
    before, after = axes_list("axes", axes, 2)
    plot_stage_memory(choice.configured_stages(), ax=before)
    before.set_title("configured recompute" + ("" if choice.pricing.baseline.name == "configured" else
                                                " (does not fit)"), fontsize=10)
    before.get_legend().remove()
    plot_stage_memory(choice.stages, ax=after)
    after.set_title(f"chosen: {choice.short_headline()}" if choice.chosen else
                    "lightest options (nothing fits)", fontsize=10)
    return before, after


def plot_layer_options(choice: RecomputeChoice, *, ax: Axes | None = None, label: str | None = None) -> Axes:
    """One coloured cell per body layer (model order) by option, stage boundaries marked, offload hatched.

    Examples
    --------
    >>> from sappkit.layers.table import LayerTable
    >>> from sappkit.recompute.partition import Partition
    >>> from sappkit.recompute.chooser import choose_recompute
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=b,
    ...              activation_mb=a) for o, a, b in (("none", 40, 2), ("full", 5, 3))]
    >>> cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    >>> choice = choose_recompute(LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=4,
    ...                           cells=cells), memory_mb=320)
    >>> [t.get_text() for t in plot_layer_options(choice).get_legend().get_texts()]
    ['none', 'full']
    """
    if not isinstance(choice, RecomputeChoice):
        raise InputError(f"choice must be a RecomputeChoice; got {type(choice).__name__}")
    ax = axes_for(ax, (10, 1.6))
    layers = choice.layer_options
    options = list(dict.fromkeys(choice.pricing.layers.frame["option"]))
    colors = _colors(options)
    for row in layers.itertuples(index=False):
        ax.bar(row.layer, 1, width=1.0, color=colors[row.option], edgecolor="white", linewidth=0.3,
               hatch="///" if row.offloaded_mb > 0 else None)
    for x in np.flatnonzero(np.diff(layers["stage"].to_numpy(int))) + 0.5:
        ax.axvline(x, color="black", linewidth=1)
    handles = [Patch(color=colors[o], label=o) for o in options if o in set(layers["option"])]
    if (layers["offloaded_mb"] > 0).any():
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="offloaded"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_yticks([])
    ax.set_xlim(-0.5, max(len(layers), 1) - 0.5)
    ax.set_xlabel("body layer (stage boundaries in black)")
    title = label if label is not None else choice.short_headline()
    ax.set_title(title, fontsize=10, loc="left")
    return ax


def _colors(options) -> dict[str, str]:
    colors = dict(_OPTION_COLORS)
    others = [o for o in options if o not in colors]
    colors.update({o: _OTHER_COLORS[i % len(_OTHER_COLORS)] for i, o in enumerate(others)})
    return colors
