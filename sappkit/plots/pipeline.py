"""Drawings of the pipeline model: the simulated schedule, memory over the step, per-stage memory bars."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .._check import short
from .._frames import check_frame
from ..columns import (
    ACTIVATION_MB, CHUNK, CONST_MB, LIMIT_MB, MEMORY_MB, OVERHEAD_MB, PARAM_MB, RECOMPUTE_TIME, STAGE, TIME, WORKING_MB,
)
from ..errors import InputError
from ..layers.units import format_time
from ..pipeline.simulator import END, MICRO_BATCH, PHASE, START, Simulation
from ._axes import axes_for, optional_number, time_label

__all__ = ["plot_schedule", "plot_memory_timeline", "plot_simulation", "plot_stage_memory"]

#: Stacked parts of a stage-memory bar, bottom up, with their legend labels.
MEMORY_PARTS = ((PARAM_MB, "parameters"), (ACTIVATION_MB, "activations"), (OVERHEAD_MB, "interleave overhead"),
                (WORKING_MB, "working set"), (CONST_MB, "constant"))
_PART_COLORS = ("#4c72b0", "#dd8452", "#c44e52", "#8172b3", "#937860")
#: Ops above which the Gantt chart leaves out micro-batch numbers (they would not be readable).
_LABELLED_OPS = 160


def _chunk_colors(chunk: int) -> tuple[str, str]:
    """(forward, backward) colours of a chunk: a light and a dark shade of one hue."""
    palette = plt.get_cmap("tab20").colors
    dark, light = palette[(2 * chunk) % 20], palette[(2 * chunk + 1) % 20]
    return light, dark


def _check_simulation(sim) -> Simulation:
    if not isinstance(sim, Simulation):
        raise InputError(f"sim must be a sappkit.Simulation (from sappkit.simulate); got {type(sim).__name__}")
    return sim


def plot_schedule(sim: Simulation, *, ax: Axes | None = None) -> Axes:
    """Gantt chart of a simulated step: one row per stage, forward light, backward dark, recompute hatched.

    Each chunk has its own hue; a split backward's input pass is dark like a
    whole backward and its weight pass darker. Micro-batch numbers are written
    on the ops when there are few enough to read.

    Examples
    --------
    >>> import pandas as pd, sappkit
    >>> costs = pd.DataFrame(dict(stage=[0, 1], chunk=0, forward_time=1.0, backward_time=2.0,
    ...                           recompute_time=0.5, activation_mb=1.0))
    >>> ax = plot_schedule(sappkit.simulate(costs, schedule="1f1b", micro_batches=3))
    >>> ax.get_ylabel()
    'stage'
    """
    timeline = _check_simulation(sim).timeline
    ax = axes_for(ax, (10, 0.35 * len(sim.stages) + 1.5))
    start, end = timeline[START].to_numpy(), timeline[END].to_numpy()
    stage = timeline[STAGE].to_numpy()
    phase = timeline[PHASE].to_numpy()
    colors = [_phase_color(c, ph) for c, ph in zip(timeline[CHUNK], phase)]
    ax.add_collection(PolyCollection(_boxes(start, end, stage), facecolors=colors, edgecolors="white",
                                     linewidths=0.4))
    recompute = timeline[RECOMPUTE_TIME].to_numpy()
    shaded = recompute > 0
    if shaded.any():
        ax.add_collection(PolyCollection(_boxes(start[shaded], start[shaded] + recompute[shaded], stage[shaded]),
                                         facecolors="none", edgecolors="black", linewidths=0, hatch="////",
                                         alpha=0.5))
    if len(timeline) <= _LABELLED_OPS:
        for x0, x1, y, unit in zip(start, end, stage, timeline[MICRO_BATCH]):
            ax.text((x0 + x1) / 2, y, str(unit), ha="center", va="center", fontsize=7)
    p = len(sim.stages)
    ax.set_xlim(0, sim.step_time)
    ax.set_ylim(p - 0.5, -0.5)
    ax.set_yticks(range(p))
    ax.set_xlabel(time_label("time", sim.time_unit))
    ax.set_ylabel("stage")
    handles = []
    split = (phase == "backward_weight").any()
    for chunk in range(sim.chunks):
        suffix = f" (chunk {chunk})" if sim.chunks > 1 else ""
        handles += [Patch(color=_phase_color(chunk, "forward"), label="forward" + suffix),
                    Patch(color=_phase_color(chunk, "backward"),
                          label=("backward or input pass" if split else "backward") + suffix)]
        if split:
            handles.append(Patch(color=_phase_color(chunk, "backward_weight"), label="weight pass" + suffix))
    if shaded.any():
        handles.append(Patch(facecolor="none", edgecolor="black", hatch="////", label="recompute"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    ax.set_title(f"{sim.schedule}: step time {format_time(sim.step_time, sim.time_unit)}, "
                 f"bubble {sim.bubbles['real']:.1%}")
    return ax


def _phase_color(chunk: int, phase: str):
    """A phase's colour in its chunk's hue: forward light, backward and input pass dark, weight pass darker."""
    light, dark = _chunk_colors(chunk)
    if phase == "forward":
        return light
    return tuple(0.55 * x for x in dark) if phase == "backward_weight" else dark


def _boxes(start, end, stage) -> np.ndarray:
    """Rectangles ``[x0, x1] x [stage - 0.4, stage + 0.4]`` as polygon vertices."""
    low, high = stage - 0.4, stage + 0.4
    return np.stack([np.column_stack(corner) for corner in
                     ((start, low), (end, low), (end, high), (start, high))], axis=1)


def plot_memory_timeline(sim: Simulation, *, ax: Axes | None = None) -> Axes:
    """Each stage's memory over the step (a step line per stage), with the device limit when known.

    Examples
    --------
    >>> import pandas as pd, sappkit
    >>> costs = pd.DataFrame(dict(stage=[0, 1], chunk=0, forward_time=1.0, backward_time=2.0,
    ...                           activation_mb=10.0))
    >>> ax = plot_memory_timeline(sappkit.simulate(costs, schedule="1f1b", micro_batches=3, limit_mb=60))
    >>> len(ax.get_lines())
    3
    """
    memory = _check_simulation(sim).memory
    ax = axes_for(ax, (10, 4))
    p = len(sim.stages)
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, p))
    for stage, rows in memory.groupby(STAGE, sort=True):
        time = np.append(rows[TIME].to_numpy(), sim.step_time)
        value = np.append(rows[MEMORY_MB].to_numpy(), rows[MEMORY_MB].iloc[-1])
        ax.step(time, value, where="post", color=colors[stage], linewidth=1.2, label=f"stage {stage}")
    limit = _limit(sim.stages, None)
    if limit is not None:
        ax.axhline(limit, color="red", linestyle="--", linewidth=1, label="limit")
    ax.set_xlim(0, sim.step_time)
    ax.set_xlabel(time_label("time", sim.time_unit))
    ax.set_ylabel("memory (MB)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False, ncol=1 + p // 17)
    return ax


def plot_simulation(sim: Simulation, *, fig: Figure | None = None) -> Figure:
    """The schedule above the memory timeline on a shared time axis, with the bubble split in the title.

    Examples
    --------
    >>> import pandas as pd, sappkit
    >>> costs = pd.DataFrame(dict(stage=[0, 1], chunk=0, forward_time=1.0, backward_time=2.0,
    ...                           activation_mb=10.0))
    >>> len(plot_simulation(sappkit.simulate(costs, schedule="1f1b", micro_batches=3)).axes)
    2
    """
    _check_simulation(sim)
    if fig is None:
        fig = plt.figure(figsize=(11, 0.3 * len(sim.stages) + 5), layout="constrained")
    elif not isinstance(fig, Figure):
        raise InputError(f"fig must be a matplotlib Figure or None; got {short(fig)}")
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw=dict(height_ratios=(3, 2)))
    plot_schedule(sim, ax=top)
    plot_memory_timeline(sim, ax=bottom)
    top.set_xlabel("")
    b = sim.bubbles
    fig.suptitle(f"bubble {b['real']:.1%} = ideal {b['ideal']:.1%} + imbalance {b['imbalance']:.1%} "
                 f"+ recompute {b['recompute']:.1%};  peak {sim.stages[MEMORY_MB].max():,.0f} MB")
    return fig


def plot_stage_memory(stages: pd.DataFrame, *, limit_mb: float | None = None, ax: Axes | None = None) -> Axes:
    """Stacked per-stage memory bars of the shared schema against the device limit.

    Parts (parameters, activations, interleave overhead, working set,
    constant) that are zero on every stage are left out. A stage whose
    ``memory_mb`` is not the sum of its parts (a model that reports the
    higher of two peaks) gets a black tick at ``memory_mb``; a stage over the
    limit gets a red outline. ``limit_mb`` defaults to the frame's ``limit_mb``.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(stage=[0, 1], param_mb=[100.0, 100.0], activation_mb=[50.0, 20.0],
    ...                           overhead_mb=0.0, working_mb=0.0, const_mb=10.0,
    ...                           memory_mb=[160.0, 130.0], limit_mb=150.0))
    >>> [t.get_text() for t in plot_stage_memory(frame).get_legend().get_texts()]
    ['limit 150 MB', 'parameters', 'activations', 'constant']
    """
    columns = (STAGE, *(part for part, _ in MEMORY_PARTS), MEMORY_MB)
    stages = check_frame(stages, "stages", columns, "per-stage memory", numeric=columns[1:], gaps=(LIMIT_MB,),
                         whole=(STAGE,), rows=True)
    limit_mb = optional_number("limit_mb", limit_mb)
    ax = axes_for(ax, (max(4.0, 0.45 * len(stages) + 2), 4))
    x = stages[STAGE].to_numpy()
    bottom = np.zeros(len(stages))
    for (part, label), color in zip(MEMORY_PARTS, _PART_COLORS):
        values = stages[part].to_numpy(dtype=float)
        if np.any(values != 0):
            ax.bar(x, values, bottom=bottom, color=color, label=label, width=0.8)
            bottom += values
    memory = stages[MEMORY_MB].to_numpy(dtype=float)
    apart = ~np.isclose(memory, bottom, rtol=1e-9, atol=1e-6)
    if apart.any():
        ax.scatter(x[apart], memory[apart], marker="_", s=300, color="black", zorder=3, label="peak")
    limit = _limit(stages, limit_mb)
    if limit is not None:
        ax.axhline(limit, color="red", linestyle="--", linewidth=1, label=f"limit {limit:,.0f} MB")
        over = memory > limit
        if over.any():
            ax.bar(x[over], memory[over], width=0.8, fill=False, edgecolor="red", linewidth=1.5)
    ax.set_xticks(x)
    ax.set_xlabel("stage")
    ax.set_ylabel("memory (MB)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax


def _limit(stages: pd.DataFrame, limit_mb) -> float | None:
    """The limit to draw: the argument, else the frame's ``limit_mb`` when it has one."""
    if limit_mb is not None:
        return float(limit_mb)
    if LIMIT_MB in stages.columns and stages[LIMIT_MB].notna().any():
        return float(stages[LIMIT_MB].dropna().iloc[0])
    return None
