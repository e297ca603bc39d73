"""What one more fully recomputed layer buys: memory freed against time cost, one point per plan."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import StrMethodFormatter
from matplotlib.transforms import Bbox

from .._check import check_int
from .._frames import check_frame
from ..columns import KIND, MEMORY_MB, STAGE
from ..layers.units import time_unit_of
from ._axes import axes_for, optional_number, stage_colorbar, stage_scale, time_label

__all__ = ["plot_alternatives"]

# The alternatives frame's columns this plot reads (sappkit.alternatives builds the frame).
_FROM_MODE = "from_mode"
_FREED = "memory_freed_mb"
_COST = "time_cost"
_NEEDED = (STAGE, KIND, _FROM_MODE, _FREED, _COST)
_MARKERS = ("o", "^", "s", "D", "v", "P")
_LABEL_POINTS = 7
#: Where a label may go beside its point: level with it, then ever further above or below (in label heights).
_STEPS = (0, 1, -1, 2, -2, 3, -3)


def plot_alternatives(frame: pd.DataFrame, *, ax=None, peak_mb: float | None = None, labels: int | bool = 6):
    """Memory each alternative frees on its stage against the time it costs, the current plan at the origin.

    Parameters
    ----------
    frame : DataFrame
        The frame :func:`sappkit.alternatives` returns: one row per plan,
        with ``stage``, ``kind``, ``from_mode``, ``memory_freed_mb`` and
        ``time_cost`` (and ``memory_mb`` when ``peak_mb`` is given); the
        time axis shows the frame's ``attrs["time_unit"]``.
    ax : Axes, optional
        Where to draw; a new figure when omitted.
    peak_mb : float, optional
        The current plan's peak: alternatives whose peak (``memory_mb``) is
        lower relieve the stage that binds; they are drawn on top, ringed.
    labels : int or bool
        How many points to name with their stage, kind and the mode the
        layer leaves (True: every point), the points that lower the peak first,
        then the best trades (nothing else frees more for less);
        a label that would overlap another label, a point or the frame is
        left out. The other points are told apart by their stage colour.

    Returns
    -------
    Axes
        Colour is the stage, the marker the mode the layer leaves; points
        up and to the left free more for less.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(stage=[0, 2], kind=["block", "block"], from_mode=["off", "selective"],
    ...                           memory_freed_mb=[1200.0, 400.0], time_cost=[6.0, 2.5],
    ...                           memory_mb=[5000.0, 5400.0]))
    >>> ax = plot_alternatives(frame, peak_mb=5400.0)
    >>> [text.get_text() for text in ax.texts]
    ['current', 's0 block (off)', 's2 block (selective)']
    >>> [text.get_text() for text in ax.get_legend().get_texts()]
    ['from off', 'from selective', 'lowers the peak']
    >>> ax.get_xlabel()
    'time cost on its stage, forward + backward per micro-batch (time units)'
    """
    unit = time_unit_of(frame)
    needed = _NEEDED + ((MEMORY_MB,) if peak_mb is not None else ())
    frame = check_frame(frame, "frame", needed, "a sappkit.alternatives frame", numeric=(_FREED, _COST, MEMORY_MB),
                        whole=(STAGE,))
    peak_mb = optional_number("peak_mb", peak_mb)
    if not isinstance(labels, bool):
        labels = check_int("labels", labels, minimum=0)
    ax = axes_for(ax, (8, 5))
    ax.scatter([0.0], [0.0], marker="*", s=160, color="black", zorder=5)
    ax.annotate("current", (0.0, 0.0), xytext=(6, -12), textcoords="offset points", fontsize=8)
    ax.axhline(0.0, color="grey", linewidth=0.6)
    ax.axvline(0.0, color="grey", linewidth=0.6)
    ax.set_xlabel(time_label("time cost on its stage, forward + backward per micro-batch", unit))
    ax.set_ylabel("memory freed on its stage (MB)")
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    if frame.empty:
        ax.set_title("no alternative fits")
        return ax
    stages = frame[STAGE].astype(int)
    scale = stage_scale(int(stages.min()), int(stages.max()))
    lower = frame[MEMORY_MB] < peak_mb if peak_mb is not None else pd.Series(False, index=frame.index)
    handles = []
    for (mode, rows), marker in zip(frame.groupby(_FROM_MODE, sort=False), _MARKERS * len(frame)):
        points = ax.scatter(rows[_COST], rows[_FREED], c=rows[STAGE].astype(int), marker=marker, zorder=2, **scale)
        handles.append(Line2D([], [], marker=marker, linestyle="", color="grey", label=f"from {mode}"))
        ringed = rows[lower[rows.index]]
        if len(ringed):
            ax.scatter(ringed[_COST], ringed[_FREED], c=ringed[STAGE].astype(int), marker=marker, s=70,
                       edgecolors="red", linewidths=1.8, zorder=4, **scale)
    if lower.any():
        handles.append(Line2D([], [], marker="o", markersize=8, linestyle="", color="grey", markeredgecolor="red",
                              markeredgewidth=1.8, label="lowers the peak"))
    stage_colorbar(ax, points)
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles), fontsize=8,
              frameon=False, borderaxespad=0.2)
    ax.set_title("one more fully recomputed layer", pad=24)
    _freeze_limits(ax, frame)
    count = len(frame) if labels is True else int(labels)
    shown = frame.loc[_label_order(frame, peak_mb=peak_mb)[:count]]
    texts = [f"s{getattr(row, STAGE)} {getattr(row, KIND)} ({getattr(row, _FROM_MODE)})"
             for row in shown.itertuples(index=False)]
    _place_labels(ax, shown[[_COST, _FREED]].to_numpy(float), texts,
                  obstacles=np.vstack([[0.0, 0.0], frame[[_COST, _FREED]].to_numpy(float)]))
    return ax


def _label_order(frame: pd.DataFrame, *, peak_mb: float | None = None) -> list:
    """The index of ``frame``'s rows in the order they deserve a label: those that lower the peak (lowest new peak,
    then cheapest), then the best trades (no other frees more for less; most freed first), then the rest.

    Examples
    --------
    >>> frame = pd.DataFrame(dict(memory_freed_mb=[100.0, 300.0, 200.0, 50.0], time_cost=[1.0, 2.0, 2.0, 1.5],
    ...                           memory_mb=[900.0, 990.0, 1000.0, 1000.0]))
    >>> _label_order(frame, peak_mb=1000.0)
    [0, 1, 2, 3]
    >>> _label_order(frame)
    [1, 0, 2, 3]
    """
    lower = frame.index[frame[MEMORY_MB] < peak_mb] if peak_mb is not None else frame.index[:0]
    lower = list(frame.loc[lower].sort_values([MEMORY_MB, _COST], kind="stable").index)
    cost, freed = frame[_COST].to_numpy(float), frame[_FREED].to_numpy(float)
    dominated = [bool(np.any((cost <= c) & (freed >= f) & ((cost < c) | (freed > f)))) for c, f in zip(cost, freed)]
    by_freed = frame.assign(_dominated=dominated).sort_values(["_dominated", _FREED], ascending=[True, False],
                                                               kind="stable").index
    first = set(lower)
    return lower + [row for row in by_freed if row not in first]


def _freeze_limits(ax, frame: pd.DataFrame) -> None:
    """Fix the view on the points and the origin with room for labels, so that labels placed now stay put."""
    x = np.append(frame[_COST].to_numpy(float), 0.0)
    y = np.append(frame[_FREED].to_numpy(float), 0.0)
    width, height = max(np.ptp(x), 1e-9), max(np.ptp(y), 1e-9)
    ax.set_xlim(x.min() - 0.08 * width, x.max() + 0.25 * width)
    ax.set_ylim(y.min() - 0.08 * height, y.max() + 0.08 * height)


def _place_labels(ax, points: np.ndarray, texts: list[str], *, obstacles: np.ndarray) -> None:
    """Write each text beside its point where it overlaps no label already written, no point and stays inside the
    Axes (a leader line when it sits above or below its point); a text with no such place is left out."""
    renderer = ax.figure.canvas.get_renderer()
    scale = ax.figure.dpi / 72.0  # display pixels per point
    frame_box = ax.get_window_extent(renderer)
    radius = 4.0 * scale
    blocked = [Bbox.from_extents(px - radius, py - radius, px + radius, py + radius)
               for px, py in ax.transData.transform(obstacles)]
    taken: list[Bbox] = []
    for (x, y), text in zip(points, texts):
        probe = ax.text(0, 0, text, fontsize=_LABEL_POINTS)
        width, height = probe.get_window_extent(renderer).size
        probe.remove()
        px, py = ax.transData.transform((x, y))
        # Towards the middle first: the side with more room.
        sides = (-1, 1) if px > frame_box.x0 + frame_box.width / 2 else (1, -1)
        for side, step in ((side, step) for step in _STEPS for side in sides):
            dx, dy = side * 7.0, step * (height / scale + 2.0)
            left = px + dx * scale - (width if side < 0 else 0.0)
            box = Bbox.from_bounds(left, py + dy * scale - height / 2, width, height)
            # A label away from its point has a leader line to it, which may cross no other label either.
            leader = Bbox.from_extents(*sorted((px, px + dx * scale)), *sorted((py, py + dy * scale)))
            inside = frame_box.x0 <= box.x0 and box.x1 <= frame_box.x1 and frame_box.y0 <= box.y0 and \
                box.y1 <= frame_box.y1
            if inside and not any(box.overlaps(other) for other in taken + blocked) and \
                    not (step and any(leader.overlaps(other) for other in taken)):
                ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=_LABEL_POINTS,
                            ha="left" if side > 0 else "right", va="center",
                            arrowprops=dict(arrowstyle="-", color="0.4", linewidth=0.6, shrinkA=0, shrinkB=3)
                            if step else None)
                taken.append(Bbox.union([box, leader]) if step else box)
                break
