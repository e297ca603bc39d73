"""Drawings of the pipeline model: the simulated schedule, memory over the step, per-stage memory bars."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import StrMethodFormatter

from .._check import short
from .._frames import check_frame
from ..columns import (
    ACTIVATION_MB, CHUNK, CONST_MB, LIMIT_MB, MEMORY_MB, OVERHEAD_MB, PARAM_MB, RECOMPUTE_TIME, STAGE, TIME, WORKING_MB,
)
from ..errors import InputError
from ..layers.units import format_share, format_time
from ..pipeline.simulator import END, MICRO_BATCH, PHASE, START, Simulation
from ._axes import axes_for, optional_number, stage_colorbar, stage_scale, stage_ticks, time_label

__all__ = ["plot_schedule", "plot_memory_timeline", "plot_simulation", "plot_stage_memory", "plot_plan"]

#: Stacked parts of a stage-memory bar, bottom up, with their legend labels.
MEMORY_PARTS = ((PARAM_MB, "parameters"), (ACTIVATION_MB, "activations"), (OVERHEAD_MB, "interleave overhead"),
                (WORKING_MB, "working set"), (CONST_MB, "constant"))
_PART_COLORS = ("#4c72b0", "#dd8452", "#c44e52", "#8172b3", "#937860")
#: Font sizes (points) of the micro-batch numbers: the largest, and the smallest still written.
_LABEL_POINTS = (7.0, 5.0)
#: Width of a digit in DejaVu Sans, matplotlib's default font, as a fraction of the font size.
_DIGIT_EM = 0.64


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
    whole backward and its weight pass darker. Each op carries its
    micro-batch number in the largest font (up to 7 pt) its box holds as
    drawn, or none where 5 pt would not fit.

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
    p = len(sim.stages)
    ax.set_xlim(0, sim.step_time)
    ax.set_ylim(p - 0.5, -0.5)
    # Only the numbers that fit now: laying the figure out later only shrinks the Axes.
    numbers = [str(number) for number in timeline[MICRO_BATCH]]
    width, height = ax.get_window_extent().size * 72 / ax.figure.dpi
    sizes = _label_size((end - start) * width / sim.step_time, 0.8 * height / p, np.array([len(n) for n in numbers]))
    for x0, x1, y, number, size in zip(start, end, stage, numbers, sizes):
        if size > 0:
            ax.add_artist(_OpLabel(x0, x1, y, number))
    stage_ticks(ax.yaxis)
    ax.set_xlabel(time_label("time", sim.time_unit))
    ax.set_ylabel("stage")
    handles = _phase_handles(sim.chunks, (phase == "backward_weight").any())
    if shaded.any():
        handles.append(Patch(facecolor="none", edgecolor="black", hatch="////", label="recompute"))
    # Above the chart, so that a colour bar beside the memory timeline below lines up with it.
    columns = min(len(handles), 6)
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=columns, fontsize=8,
              frameon=False, borderaxespad=0.2)
    ax.set_title(f"{_headline(sim)}, bubble {format_share(sim.bubbles['real'])}", pad=8 + 14 * -(-len(handles) // columns))
    return ax


def _headline(sim: Simulation) -> str:
    return f"{sim.schedule}: step time {format_time(sim.step_time, sim.time_unit)}"


def _label_size(width, height, digits):
    """The font size (points) of numbers of ``digits`` digits on ops ``width`` x ``height`` points: the largest up
    to 7 pt, in half points, with a point of padding each side and the text's box (1.2 em with its descent)
    inside the op's; 0 where 5 pt would not fit."""
    size = np.floor(2 * np.minimum(np.minimum((width - 2.0) / (_DIGIT_EM * digits), height / 1.2),
                                   _LABEL_POINTS[0])) / 2
    return np.where(size >= _LABEL_POINTS[1], size, 0.0)


class _OpLabel(Text):
    """An op's micro-batch number, sized when drawn to the op's box as it then is (figures are laid out late)."""

    def __init__(self, start: float, end: float, stage: float, text: str):
        super().__init__((start + end) / 2, stage, text, ha="center", va="center", fontsize=_LABEL_POINTS[0])
        self.set_in_layout(False)  # inside its op, inside the Axes: nothing for a layout engine to make room for
        self._corners = ((start, stage - 0.4), (end, stage + 0.4))

    def draw(self, renderer):
        (x0, y0), (x1, y1) = self.axes.transData.transform(self._corners)
        per_point = renderer.points_to_pixels(1.0)
        size = float(_label_size(abs(x1 - x0) / per_point, abs(y1 - y0) / per_point, len(self.get_text())))
        # Changed only when it must: a change marks the figure stale, which would ask for another draw.
        if (size > 0) != self.get_visible():
            self.set_visible(size > 0)
        if size > 0 and size != self.get_fontsize():
            self.set_fontsize(size)
        super().draw(renderer)


def _phase_handles(chunks: int, split: bool) -> list[Patch]:
    """Legend entries of the phases and chunks: one chunk, an entry per phase; more, an entry per chunk (its
    hue) and one saying which shade is which phase, so that eight chunks make nine entries, not 24."""
    phases = [("forward", "forward"), ("backward", "backward or input pass" if split else "backward")]
    phases += [("backward_weight", "weight pass")] if split else []
    if chunks == 1:
        return [Patch(color=_phase_color(0, key), label=label) for key, label in phases]
    shades = ", ".join(f"{shade} {label}" for shade, (_, label) in zip(("light", "dark", "darker"), phases))
    return [*(Patch(color=_phase_color(chunk, "backward"), label=f"chunk {chunk}") for chunk in range(chunks)),
            Patch(color="none", label=shades)]


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
    """Each stage's memory over the step (a step line per stage, coloured by the stage's colour bar), with the
    device limit when known.

    Examples
    --------
    >>> import pandas as pd, sappkit
    >>> costs = pd.DataFrame(dict(stage=[0, 1], chunk=0, forward_time=1.0, backward_time=2.0,
    ...                           activation_mb=10.0))
    >>> ax = plot_memory_timeline(sappkit.simulate(costs, schedule="1f1b", micro_batches=3, limit_mb=60))
    >>> len(ax.get_lines()), [t.get_text() for t in ax.texts]
    (3, ['limit 60 MB'])
    """
    memory = _check_simulation(sim).memory
    ax = axes_for(ax, (10, 4))
    p = len(sim.stages)
    scale = stage_scale(0, p - 1)
    colors = scale["cmap"](scale["norm"](np.arange(p)))
    for stage, rows in memory.groupby(STAGE, sort=True):
        time = np.append(rows[TIME].to_numpy(), sim.step_time)
        value = np.append(rows[MEMORY_MB].to_numpy(), rows[MEMORY_MB].iloc[-1])
        ax.step(time, value, where="post", color=colors[stage], linewidth=1.2, label=f"stage {stage}")
    limit = _limit(sim.stages, None)
    if limit is not None:
        ax.axhline(limit, color="red", linestyle="--", linewidth=1)
        ax.annotate(f"limit {limit:,.0f} MB", (1.0, limit), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8, color="red")
        low, high = ax.get_ylim()
        ax.set_ylim(low, max(high, limit + 0.1 * (limit - low)))  # room for the limit's label inside the Axes
    ax.set_xlim(0, sim.step_time)
    ax.set_xlabel(time_label("time", sim.time_unit))
    ax.set_ylabel("memory (MB)")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    stage_colorbar(ax, ScalarMappable(**scale))
    return ax


def plot_simulation(sim: Simulation, *, fig: Figure | None = None) -> Figure:
    """The schedule above the memory timeline on a shared time axis; the step time and the peak, then the
    bubble split, stated once, in the figure's two-line title.

    Examples
    --------
    >>> import pandas as pd, sappkit
    >>> costs = pd.DataFrame(dict(stage=[0, 1], chunk=0, forward_time=1.0, backward_time=2.0,
    ...                           activation_mb=10.0))
    >>> figure = plot_simulation(sappkit.simulate(costs, schedule="1f1b", micro_batches=3))
    >>> [ax.get_label() or ax.get_ylabel() for ax in figure.axes]
    ['stage', 'memory (MB)', '<colorbar>']
    >>> print(figure.get_suptitle())
    1f1b: step time 12 time units; peak 20 MB
    bubble 33.3% of the compute = ideal 33.3% + imbalance 0.0% + recompute 0.0% (idle 25.0% of the step)
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
    top.set_title("")
    # Rounded first, so that a split that is zero up to rounding shows as 0.0%, not -0.0%.
    b = {name: round(float(value), 4) + 0.0 for name, value in sim.bubbles.items()}
    # Two lines: on one, the split of the bubble made the title wider than the 11 in figure.
    fig.suptitle(f"{_headline(sim)}; peak {sim.stages[MEMORY_MB].max():,.0f} MB\n"
                 f"bubble {format_share(b['real'], of='the compute')} = ideal {format_share(b['ideal'])} + "
                 f"imbalance {format_share(b['imbalance'])} + recompute {format_share(b['recompute'])} "
                 f"(idle {b['of_step']:.1%} of the step)")
    return fig


def plot_plan(plan, *, fig: Figure | None = None) -> Figure:
    """A balanced plan's simulated schedule (Gantt chart) beside its stage memory against the limit.

    The chart takes 3.5 parts of the width to the memory's one (in a 14 x 4.5 in figure by default) and its
    legend goes above the whole figure in one row: above the chart alone, the layout took the legend's
    overhang (the long entry explaining the shades) off the chart's width.

    Examples
    --------
    >>> import sappkit
    >>> plan = sappkit.balance(sappkit.read_layers_json("data/llama2_70b.json"), stages=4, micro_batches=8,
    ...                        memory_mb=70000)
    >>> figure = plot_plan(plan)
    >>> [ax.get_ylabel() for ax in figure.axes][:2], len(figure.legends)
    (['stage', 'memory (MB)'], 1)
    """
    if not callable(getattr(plan, "simulate", None)) or not isinstance(getattr(plan, "stages", None), pd.DataFrame):
        raise InputError(f"plan must be a sappkit.Plan (from sappkit.balance); got {type(plan).__name__}")
    if not plan.has_plan:
        raise InputError(f"plan has no placement to draw (status {plan.status!r})")
    if fig is None:
        fig = plt.figure(figsize=(14, 4.5), layout="constrained")
    elif not isinstance(fig, Figure):
        raise InputError(f"fig must be a matplotlib Figure or None; got {short(fig)}")
    gantt, memory = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[3.5, 1]))
    plot_schedule(plan.simulate(), ax=gantt)
    plot_stage_memory(plan.stages, ax=memory)
    legend = gantt.get_legend()
    fig.legend(handles=legend.legend_handles, labels=[text.get_text() for text in legend.get_texts()],
               loc="outside upper left", ncol=len(legend.legend_handles), fontsize=8, frameon=False)
    legend.remove()
    gantt.set_title(gantt.get_title())  # the title's default pad: no legend rows to clear now
    return fig


def plot_stage_memory(stages: pd.DataFrame, *, limit_mb: float | None = None, ax: Axes | None = None) -> Axes:
    """Stacked per-stage memory bars of the shared schema against the device limit.

    Parts (parameters, activations, interleave overhead, working set,
    constant) that are zero on every stage are left out. A negative
    ``overhead_mb`` (fewer activations held at the peak than every cell's
    in-flight count, as zero-bubble orders have) is taken off the
    activations, never stacked. A black tick marks each stage's
    ``memory_mb``, its peak (above the bars where a model reports the
    higher of two peaks); a stage over the limit gets a red outline. ``limit_mb`` defaults to the frame's ``limit_mb``.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(stage=[0, 1], param_mb=[100.0, 100.0], activation_mb=[50.0, 20.0],
    ...                           overhead_mb=0.0, working_mb=0.0, const_mb=10.0,
    ...                           memory_mb=[160.0, 130.0], limit_mb=150.0))
    >>> [t.get_text() for t in plot_stage_memory(frame).get_legend().get_texts()]
    ['peak', 'limit 150 MB', 'parameters', 'activations', 'constant']
    """
    columns = (STAGE, *(part for part, _ in MEMORY_PARTS), MEMORY_MB)
    stages = check_frame(stages, "stages", columns, "per-stage memory", numeric=columns[1:], gaps=(LIMIT_MB,),
                         whole=(STAGE,), rows=True)
    limit_mb = optional_number("limit_mb", limit_mb)
    ax = axes_for(ax, (max(4.0, 0.45 * len(stages) + 2), 4))
    x = stages[STAGE].to_numpy()
    bottom = np.zeros(len(stages))
    for (part, label), values, color in zip(MEMORY_PARTS, _drawn_parts(stages), _PART_COLORS):
        if np.any(values != 0):
            ax.bar(x, values, bottom=bottom, color=color, label=label, width=0.8)
            bottom += values
    memory = stages[MEMORY_MB].to_numpy(dtype=float)
    ax.scatter(x, memory, marker="_", s=300, color="black", zorder=3, label="peak")
    limit = _limit(stages, limit_mb)
    if limit is not None:
        ax.axhline(limit, color="red", linestyle="--", linewidth=1, label=f"limit {limit:,.0f} MB")
        over = memory > limit
        if over.any():
            ax.bar(x[over], memory[over], width=0.8, fill=False, edgecolor="red", linewidth=1.5)
    stage_ticks(ax.xaxis)
    ax.set_xlabel("stage")
    ax.set_ylabel("memory (MB)")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    return ax


def _drawn_parts(stages: pd.DataFrame) -> list[np.ndarray]:
    """The heights of :data:`MEMORY_PARTS`, each >= 0: a negative overhead comes off the activations."""
    parts = {part: stages[part].to_numpy(dtype=float) for part, _ in MEMORY_PARTS}
    fewer = np.minimum(parts[OVERHEAD_MB], 0.0)
    parts[ACTIVATION_MB] = parts[ACTIVATION_MB] + fewer
    parts[OVERHEAD_MB] = parts[OVERHEAD_MB] - fewer
    return [parts[part] for part, _ in MEMORY_PARTS]


def _limit(stages: pd.DataFrame, limit_mb) -> float | None:
    """The limit to draw: the argument, else the frame's ``limit_mb`` when it has one."""
    if limit_mb is not None:
        return float(limit_mb)
    if LIMIT_MB in stages.columns and stages[LIMIT_MB].notna().any():
        return float(stages[LIMIT_MB].dropna().iloc[0])
    return None
