"""Plots of the recompute chooser: the time-saved curve, stage memory before and after, each layer's option."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Patch
from matplotlib.ticker import StrMethodFormatter

from .._check import check_choice
from .._frames import check_frame
from ..columns import MEMORY_MB, STAGE
from ..errors import InputError
from ..layers.units import time_unit_of
from ..recompute.chooser import SWEEP_COLUMNS, RecomputeChoice
from ._axes import axes_for, axes_list, optional_number, time_label
from .pipeline import MEMORY_PARTS, plot_stage_memory

__all__ = ["plot_time_saved", "plot_before_after", "plot_layer_options"]

#: Colours of the SAPP options, least to most recompute; other options cycle through the rest.
_OPTION_COLORS = {"none": "#4c72b0", "selective": "#55a868", "comm": "#8172b2", "both": "#ccb974",
                  "full": "#c44e52"}
_OTHER_COLORS = ("#64b5cd", "#937860", "#da8bc3", "#8c8c8c")
#: Font size (points) of the change written above a stage's bar.
_CHANGE_POINTS = 8
#: A character's width in matplotlib's default font, on average over digits and signs, as a fraction of its size.
_CHAR_EM = 0.6
#: The time-saved lines: solid with dots, then dashed with crosses on top, so neither hides the other.
_CURVE_STYLES = (dict(color="#3182bd", marker="o", markersize=3, linestyle="-", zorder=2),
                 dict(color="#e6550d", marker="x", markersize=5, linestyle="--", zorder=3))
_AGAINST = {"configured": ("time_saved", "against the baseline (configured where it fits, else the most recomputed)"),
            "full": ("time_saved_vs_full", "against full recompute everywhere")}
#: Characters per line of a legend entry beside an Axes.
_LEGEND_CHARS = 30


def plot_time_saved(sweep: pd.DataFrame, *, current_mb: float | None = None, against: str = "configured",
                    ax: Axes | None = None) -> Axes:
    """Time saved against the device capacity (:func:`sappkit.sweep_recompute`'s frame).

    Time saved is the body layers' forward + backward time for one
    micro-batch, summed over the stages (not a step time), in the frame's
    ``attrs["time_unit"]``.

    ``against`` is ``"configured"`` (the ``time_saved`` column: against the
    baseline the chooser states, the configured recompute where it fits,
    else every layer at its most recomputed option) or ``"full"`` (or
    ``"both"`` for two lines, solid and dashed with their own markers; two
    that agree everywhere are one line naming both baselines); capacities
    where nothing fits are shaded; ``current_mb`` marks the budget in use.
    The legend stands beside the Axes, clear of the curve and its labels.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(memory_mb=[100, 200, 300], feasible=[False, True, True], mode=None,
    ...                           time=[np.nan, 5.0, 4.0], time_saved=[np.nan, 0.0, 1.0],
    ...                           time_saved_vs_full=[np.nan, 2.0, 3.0], baseline=[None, "configured", "configured"]))
    >>> legend = plot_time_saved(frame, current_mb=250, against="both").get_legend()
    >>> [t.get_text().replace("\\n", " ") for t in legend.get_texts()]
    ['against the baseline (configured where it fits, else the most recomputed)', 'against full recompute everywhere', 'budget 250 MB', 'nothing fits']
    >>> same = frame.assign(time_saved=frame["time_saved_vs_full"])
    >>> [line.get_label() for line in plot_time_saved(same, against="both").get_lines()[:1]]
    ['against the baseline (configured where it fits, else the most recomputed) = full recompute everywhere']
    """
    unit = time_unit_of(sweep)
    sweep = check_frame(sweep, "sweep", SWEEP_COLUMNS, "sweep_recompute's frame",
                        numeric=("memory_mb",), gaps=("time", "time_saved", "time_saved_vs_full"))
    check_choice("against", against, (*_AGAINST, "both"))
    current_mb = optional_number("current_mb", current_mb)
    ax = axes_for(ax, (7, 4))
    frame = sweep.sort_values("memory_mb")
    x = frame["memory_mb"].to_numpy(float)
    names = ("configured", "full") if against == "both" else (against,)
    curves = [frame[_AGAINST[name][0]].to_numpy(float) for name in names]
    if len(curves) == 2 and np.allclose(*curves, equal_nan=True):
        curves = curves[:1]
        labels = [f"{_AGAINST['configured'][1]} = {_AGAINST['full'][1].removeprefix('against ')}"]
    else:
        labels = [_AGAINST[name][1] for name in names]
    for curve, label, style in zip(curves, labels, _CURVE_STYLES):
        ax.plot(x, curve, drawstyle="steps-post", label=label, **style)
    if current_mb is not None:
        ax.axvline(current_mb, color="black", linestyle=":", label=f"budget {current_mb:,.0f} MB")
    infeasible = ~frame["feasible"].to_numpy(bool)
    if infeasible.any():
        # From the left edge, so that a single capacity where nothing fits still shows.
        left, right = ax.get_xlim()
        left = min(left, x.min() - 0.03 * (x.max() - x.min()))
        ax.axvspan(left, x[infeasible].max(), color="0.9", zorder=0, label="nothing fits")
        ax.set_xlim(left, right)
    ax.axhline(0, color="0.6", linewidth=0.8)
    ax.set_xlabel("device memory (MB)")
    ax.set_ylabel(time_label("time saved", unit))
    ax.set_title("forward + backward per micro-batch, summed over the stages", fontsize=10)
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    handles, texts = ax.get_legend_handles_labels()
    ax.legend(handles, [textwrap.fill(text, _LEGEND_CHARS) for text in texts], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return ax


def plot_before_after(choice: RecomputeChoice, *, baseline: RecomputeChoice | None = None,
                      axes=None) -> tuple[Axes, Axes]:
    """Stage memory before and after a choice, side by side on one scale, the change written on each stage; the
    choice's title is its simulated step time against the baseline (:meth:`RecomputeChoice.short_headline`).

    "Before" is ``baseline``'s stages when given (say the plan an
    alternative of :func:`sappkit.alternatives` starts from), else the
    partition's configured recompute. Stages whose memory changed keep their
    colours and get the difference above their bar (``−1,234 MB``); the
    others are faded.
    """
    for name, value in (("choice", choice), ("baseline", baseline)):
        if not isinstance(value, RecomputeChoice) and (name == "choice" or value is not None):
            raise InputError(f"{name} must be a RecomputeChoice; got {type(value).__name__}")
        if value is not None and value.pricing.stages.empty:
            raise InputError(f"there is no stage memory to plot: {value.pricing.reason}")
    if axes is None:
        width = max(8.0, 0.5 * len(choice.stages) + 5)
        axes = plt.subplots(1, 2, figsize=(width, 4), sharey=True, layout="constrained")[1]
    before, after = axes_list("axes", axes, 2)
    frames = (choice.configured_stages() if baseline is None else baseline.stages, choice.stages)
    plot_stage_memory(frames[0], ax=before)
    configured = "configured recompute" + ("" if choice.pricing.baseline.name == "configured" else " (does not fit)")
    before.set_title(configured if baseline is None else "before", fontsize=10)
    before.get_legend().remove()
    plot_stage_memory(frames[1], ax=after)
    after.set_title(f"chosen: {choice.short_headline()}" if choice.chosen else
                    "lightest options (nothing fits)", fontsize=10)
    _mark_changes((before, after), frames)
    return before, after


def _mark_changes(axes: tuple[Axes, Axes], frames: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    """Fade the stages whose memory did not change, write each change above its bar on the right (upright where
    changes on nearby stages would touch; above the limit line where the line would cross it), and scale both alike
    with room for the changes."""
    memory = [frame.set_index(STAGE)[MEMORY_MB] for frame in frames]
    change = (memory[1] - memory[0].reindex(memory[1].index)).dropna()
    changed = set(change.index[change.abs() >= 0.5])
    for ax in axes:
        for bars in ax.containers:
            for bar in bars:
                if round(bar.get_x() + bar.get_width() / 2) not in changed:
                    bar.set_alpha(0.3)
    texts = {stage: f"{change[stage]:+,.0f} MB".replace("-", "\u2212") for stage in sorted(changed)}
    if not texts:
        return
    after = axes[1]
    points = 72 / after.figure.dpi
    width, height = (size * points for size in after.get_window_extent().size)
    longest = max(len(text) for text in texts.values()) * _CHAR_EM * _CHANGE_POINTS
    # Level unless two changes would touch: then upright, each within its bar's width.
    spacing = np.diff(sorted(texts)).min() if len(texts) > 1 else np.inf
    upright = longest > 0.9 * spacing * width / len(memory[1])
    tops = pd.concat([memory[1], _parts(frames[1])], axis=1).max(axis=1)
    room = (longest if upright else 1.4 * _CHANGE_POINTS) + 6  # points a change takes above its base
    lines = [float(line.get_ydata()[0]) for line in after.lines if len(set(line.get_ydata())) == 1]
    low, high = after.get_ylim()
    bases = tops[list(texts)].astype(float)
    for _ in range(3):  # a base lifted above a line takes more room, which may bring another change to a line
        top = max(high, low + (float(bases.max()) - low) * height / max(height - room, 1.0))
        extent = room * (top - low) / height  # a change's height in data units at this scale
        lifted = bases.map(lambda base: max([base, *(y for y in lines if base - 1e-9 <= y <= base + extent)]))
        if lifted.equals(bases):
            break
        bases = lifted
    for stage, text in texts.items():
        after.annotate(text, (stage, bases[stage]), xytext=(0, 3), textcoords="offset points", ha="center",
                       va="bottom", rotation=90 if upright else 0, fontsize=_CHANGE_POINTS)
    for ax in axes:
        ax.set_ylim(low, top)


def _parts(stages: pd.DataFrame) -> pd.Series:
    """Each stage's stacked memory parts' sum, by stage (the bar's top where a peak is below it)."""
    return stages.set_index(STAGE)[[part for part, _ in MEMORY_PARTS]].sum(axis=1)


def plot_layer_options(choice: RecomputeChoice, *, ax: Axes | None = None, label: str | None = None) -> Axes:
    """One coloured cell per body layer (model order) by option, stage boundaries marked, offload hatched.

    Where the choice ran the runtime's modes, the legend gives each option
    its mode as well, the way trainer plans and :meth:`RecomputeChoice.describe`
    write it: ``off (none)`` is the mode a runtime calls ``off``, which runs
    the recompute option ``none``.

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
    # A choice among the runtime's modes names each by its mode too, as trainer plans do ("off (none)").
    modes = dict(zip(layers["option"], layers["mode"])) if "mode" in layers else {}
    handles = [Patch(color=colors[o], label=o if modes.get(o) in (None, o) else f"{modes[o]} ({o})")
               for o in options if o in set(layers["option"])]
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
