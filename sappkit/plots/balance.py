"""Plots of the balancer: per-stage time, the memory sweep, a plan against the even partitions.

Stage-memory bars are :func:`sappkit.plot_stage_memory` (``plots.pipeline``)
applied to ``plan.stages``.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import StrMethodFormatter

from .._frames import check_frame
from ..columns import BACKWARD_TIME, FORWARD_TIME, MEMORY_MB, RECOMPUTE_TIME, STAGE, TIME
from ..layers.units import format_time, time_unit_of
from ._axes import axes_for, stage_ticks, time_label

__all__ = ["plot_stage_times", "plot_memory_sweep", "plot_plan_comparison"]

#: Columns of the memory sweep this module reads (:func:`sappkit.sweep_memory` builds the frame).
_STEP_TIME = "step_time"
_NEEDED = "memory_needed_mb"


def plot_stage_times(stages: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """Per-stage forward, backward and recompute time per micro-batch, stacked to the stage time, with the slowest
    stage's time drawn across.

    ``stages`` is a plan's ``stages`` frame: the bars stack to ``time``,
    sappkit's one stage time (docs/design.md "Time and the objectives", as
    a recompute choice and the simulator report it), and the dashed line is
    the largest, the stage that paces the pipeline's steady state. The time axis shows the frame's
    ``attrs["time_unit"]``, as do the other drawings here.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(stage=[0, 1], forward_time=[2.0, 3.0], backward_time=[4.0, 7.0],
    ...                           recompute_time=[0.0, 1.0], time=[6.0, 10.0]))
    >>> [t.get_text() for t in plot_stage_times(frame).get_legend().get_texts()]
    ['slowest stage: 10 time units', 'forward', 'backward', 'recompute']
    """
    unit = time_unit_of(stages)
    columns = (STAGE, FORWARD_TIME, BACKWARD_TIME, RECOMPUTE_TIME, TIME)
    stages = check_frame(stages, "stages", columns, "a plan's stages frame", numeric=columns[1:], whole=(STAGE,),
                         rows=True)
    ax = axes_for(ax, (max(4.0, 0.45 * len(stages) + 2), 3.5))
    x = stages[STAGE].to_numpy()
    forward = stages[FORWARD_TIME].to_numpy(dtype=float)
    recompute = stages[RECOMPUTE_TIME].to_numpy(dtype=float)
    backward = stages[BACKWARD_TIME].to_numpy(dtype=float) - recompute
    slowest = float(stages[TIME].max())
    ax.axhline(slowest, color="black", linestyle="--", linewidth=1, zorder=3,
               label=f"slowest stage: {format_time(slowest, unit)}")
    ax.bar(x, forward, width=0.8, color="#9ecae1", label="forward")
    ax.bar(x, backward, bottom=forward, width=0.8, color="#3182bd", label="backward")
    ax.bar(x, recompute, bottom=forward + backward, width=0.8, color="#fd8d3c", label="recompute")
    ax.set_ylim(0, 1.06 * max(float((forward + backward + recompute).max()), slowest))
    stage_ticks(ax.xaxis)
    ax.set_xlabel("stage")
    ax.set_ylabel(time_label("time per micro-batch", unit))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax


def plot_memory_sweep(sweep: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """Simulated step time against the memory limit, the limits no plan fits shaded.

    ``sweep`` is :func:`sappkit.sweep_memory`'s frame. The shaded span ends
    at the least memory any plan needs (``memory_needed_mb`` of the
    infeasible limits) where the sweep knows it, else at the largest limit
    without a plan; a limit above it without a plan (a solve that failed) is
    marked along the bottom.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(memory_mb=[400.0, 600.0, 1000.0], status=["infeasible", "optimal", "optimal"],
    ...                           step_time=[np.nan, 69.0, 60.0], memory_needed_mb=[530.0, np.nan, np.nan]))
    >>> ax = plot_memory_sweep(frame)
    >>> ax.get_xlabel(), ax.get_ylabel()
    ('memory limit (MB)', 'simulated step time (time units)')
    >>> [t.get_text() for t in ax.get_legend().get_texts()]
    ['simulated step time', 'no plan fits below 530 MB']
    """
    unit = time_unit_of(sweep)
    sweep = check_frame(sweep, "sweep", (MEMORY_MB, _STEP_TIME), "a memory sweep", numeric=(MEMORY_MB,),
                        gaps=(_STEP_TIME, _NEEDED))
    ax = axes_for(ax, (7, 3.5))
    sweep = sweep.sort_values(MEMORY_MB)
    placed = sweep[sweep[_STEP_TIME].notna()]
    lost = sweep[sweep[_STEP_TIME].isna()]
    ax.plot(placed[MEMORY_MB], placed[_STEP_TIME], marker="o", color="#3182bd", drawstyle="steps-post", zorder=3,
            label="simulated step time")
    ax.set_xlabel("memory limit (MB)")
    ax.set_ylabel(time_label("simulated step time", unit))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    below = lost[lost[MEMORY_MB] < placed[MEMORY_MB].min()] if len(placed) else lost
    if len(below):
        needed = below[_NEEDED].max() if _NEEDED in below else np.nan
        edge = float(below[MEMORY_MB].max() if np.isnan(needed) else needed)
        left, right = float(sweep[MEMORY_MB].min()), max(float(sweep[MEMORY_MB].max()), edge)
        pad = 0.03 * max(right - left, 1.0)
        ax.axvspan(left - pad, edge, color="0.88", zorder=0, label=f"no plan fits below {edge:,.0f} MB")
        ax.set_xlim(left - pad, right + pad)
    failed = lost.drop(index=below.index)
    if len(failed):
        ax.scatter(failed[MEMORY_MB], np.full(len(failed), ax.get_ylim()[0]), marker="x", color="red", zorder=3,
                   clip_on=False, label="no plan found")
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    return ax


def plot_plan_comparison(comparison: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """Simulated step time per plan, plans over the memory limit outlined red with their peak.

    ``comparison`` is :func:`sappkit.balancer.views.compare_plans`'s frame.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(plan=["balanced", "even none"], step_time=[10.0, 9.0],
    ...                           peak_mb=[90.0, 120.0], limit_mb=100.0, fits=[True, False]))
    >>> [t.get_text() for t in plot_plan_comparison(frame).texts]
    ['90 MB', '120 MB > 100']
    """
    unit = time_unit_of(comparison)
    comparison = check_frame(comparison, "comparison", ("plan", "step_time", "peak_mb", "limit_mb", "fits"),
                             "a plan comparison", numeric=("limit_mb",), gaps=("step_time", "peak_mb"))
    ax = axes_for(ax, (max(4.0, 1.4 * len(comparison) + 1), 3.5))
    x = np.arange(len(comparison))
    fits = comparison["fits"].to_numpy(dtype=bool)
    ax.bar(x, comparison["step_time"], width=0.6, color=np.where(fits, "#3182bd", "#bdbdbd"),
           edgecolor=np.where(fits, "#3182bd", "red"), linewidth=1.5)
    for i, row in enumerate(comparison.itertuples(index=False)):
        label = f"{row.peak_mb:,.0f} MB" + ("" if row.fits else f" > {row.limit_mb:,.0f}")
        ax.text(i, row.step_time, label, ha="center", va="bottom", fontsize=8,
                color="black" if row.fits else "red")
    ax.set_xticks(x, [textwrap.fill(str(label), 14) for label in comparison["plan"]])
    ax.set_ylabel(time_label("simulated step time", unit))
    ax.set_title("peak stage memory above each bar")
    return ax
