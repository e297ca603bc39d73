"""Plots of the balancer: per-stage time, the memory sweep, a plan against the even partitions.

Stage-memory bars are :func:`sappkit.plot_stage_memory` (``plots.pipeline``)
applied to ``plan.stages``.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from .._frames import check_frame
from ..layers.units import time_unit_of
from ._axes import axes_for, time_label
from ..columns import BACKWARD_TIME, FORWARD_TIME, RECOMPUTE_TIME, STAGE, TIME

__all__ = ["plot_stage_times", "plot_memory_sweep", "plot_plan_comparison"]


def plot_stage_times(stages: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """Per-stage forward, backward and recompute time per micro-batch, with the stage time marked.

    ``stages`` is a plan's ``stages`` frame; the marker is ``time`` (the
    seed's stage time ``max_c F + max_c B``, equal to the bar for one chunk).
    The time axis shows the frame's ``attrs["time_unit"]``, as do the other
    drawings here.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(stage=[0, 1], forward_time=[2.0, 3.0], backward_time=[4.0, 7.0],
    ...                           recompute_time=[0.0, 1.0], time=[6.0, 10.0]))
    >>> [t.get_text() for t in plot_stage_times(frame).get_legend().get_texts()]
    ['stage time', 'forward', 'backward', 'recompute']
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
    ax.bar(x, forward, width=0.8, color="#9ecae1", label="forward")
    ax.bar(x, backward, bottom=forward, width=0.8, color="#3182bd", label="backward")
    ax.bar(x, recompute, bottom=forward + backward, width=0.8, color="#fd8d3c", label="recompute")
    ax.scatter(x, stages[TIME], marker="_", s=300, color="black", zorder=3, label="stage time")
    # Zero-height recompute bars pin the autoscale at the tallest bar; leave room for its marker.
    top = max(float((forward + backward + recompute).max()), float(stages[TIME].max()))
    ax.set_ylim(0, 1.06 * top)
    ax.set_xticks(x)
    ax.set_xlabel("stage")
    ax.set_ylabel(time_label("time per micro-batch", unit))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax


def plot_memory_sweep(sweep: pd.DataFrame, *, ax: Axes | None = None) -> Axes:
    """Simulated step time (and the objective, right axis) against the memory limit.

    ``sweep`` is :func:`sappkit.sweep_memory`'s frame; limits without a plan
    are marked along the bottom as infeasible.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(memory_mb=[400.0, 600.0, 1000.0], status=["infeasible", "optimal", "optimal"],
    ...                           objective=[np.nan, 15.0, 12.0], step_time=[np.nan, 69.0, 60.0]))
    >>> plot_memory_sweep(frame).get_xlabel()
    'memory limit (MB)'
    """
    unit = time_unit_of(sweep)
    sweep = check_frame(sweep, "sweep", ("memory_mb", "status", "objective", "step_time"), "a memory sweep",
                        numeric=("memory_mb",), gaps=("objective", "step_time"))
    ax = axes_for(ax, (7, 3.5))
    placed = sweep[sweep["step_time"].notna()]
    ax.plot(placed["memory_mb"], placed["step_time"], marker="o", color="#3182bd", drawstyle="steps-post",
            label="simulated step time")
    ax.set_xlabel("memory limit (MB)")
    ax.set_ylabel(time_label("simulated step time", unit))
    right = ax.twinx()
    right.plot(placed["memory_mb"], placed["objective"], marker=".", linestyle="--", color="#e6550d",
               drawstyle="steps-post", label="objective")
    right.set_ylabel(time_label("objective", unit))
    lost = sweep[sweep["step_time"].isna()]
    if len(lost):
        bottom = ax.get_ylim()[0] if len(placed) else 0.0
        ax.scatter(lost["memory_mb"], np.full(len(lost), bottom), marker="x", color="red", zorder=3,
                   clip_on=False, label="no plan fits")
    handles = ax.get_legend_handles_labels()
    extra = right.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], loc="upper right", fontsize=8, frameon=False)
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
